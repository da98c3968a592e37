"""Every tunable of the scheduling core, in one place, with its meaning.

The same `SchedulerConfig` drives the Lambda scheduler, the local runtime and the simulator.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from spotline.domain.models import PRIORITIES_HIGH_FIRST, Priority


class VictimStrategy(StrEnum):
    """How preemption orders the candidates it may stop (see `preemption.py`)."""

    RANDOM = "random"
    LEAST_REMAINING_TIME = "least-remaining-time"
    LOWEST_UTILIZATION = "lowest-utilization"
    LEAST_LOST_WORK = "least-lost-work"
    # Lowest class first, then least lost work (Slurm and Kueue stop the lowest class first).
    LOWEST_CLASS_LEAST_LOST_WORK = "lowest-class-least-lost-work"
    # Lowest class first, then the least work a checkpointed preemption wastes (its GPUs x the
    # write, or the unsaved work when less, plus the restart and restore): the victim's size.
    LOWEST_CLASS_LEAST_COST = "lowest-class-least-cost"


class ReclaimPolicy(StrEnum):
    """Which borrowers a team under its nominal quota may preempt to take its quota back
    (Kueue's `reclaimWithinCohort`)."""

    NEVER = "never"
    LOWER_PRIORITY = "lower-priority"  # only jobs of a lower priority class (Kueue's LowerPriority)
    SAME_OR_LOWER_PRIORITY = "same-or-lower-priority"  # also the lender's peers of its own class
    ANY = "any"


_BY_RANK = {p.rank: p for p in PRIORITIES_HIGH_FIRST}


class PriorityWeights(BaseModel):
    """Weights of the multifactor effective priority (Slurm's multifactor plugin, adapted).

    effective = step * rank(class)                   # QOS: low 0, normal 1, high 2, critical 3
              + age * min(wait / max_age_s, 1)       # waiting time, capped (PriorityMaxAge)
              + deadline * urgency                   # 1 - slack / deadline_horizon_s, in [0, 1]
              + size * (gpus / size_norm_gpus)       # bigger jobs first (PriorityFavorSmall=NO)
              + fairshare * 2 ** (-usage / share)    # Slurm's classic fair-share factor
              + history * min(disruptions, history_cap) / history_cap
              - attained * min(service / attained_norm_gpu_h, 1)   # least attained service
              + shortest * shortness(declared remaining)           # shortest declared job first

    `step` is `class_step`, or with `strict_class_order` `effective_class_step` (above every
    within-class term together). With the deadline lift on (`deadline_lift_slack_s`), the class
    of a pending job whose deadline is near and in reach is `lifted`'s, one class up.

    `shortness` is 1 - min(1, ln(1 + r / 1 h) / ln(1 + shortest_norm_s / 1 h)) of the job's
    declared remaining run time r = `expected_runtime_s` - run time so far: 1 for a job about
    to end, about 0.84 with an hour left, 0.25 with a day left, 0 beyond `shortest_norm_s` (the
    logarithm separates minutes from hours, and hours from days). A job that declares nothing,
    or has run past what it declared, gets 0: declaring a short run time and overrunning it
    loses the term, and the job then ranks (and is preempted) as one that declared nothing.
    Slurm users declare a time limit for backfill; this term is what Spotline does with it.

    `service` is the GPU-hours the job has run so far (gpus x `runtime_s`): the attained-service
    term orders a class's jobs least-attained first (Tiresias, NSDI'19, in one queue per class:
    a job that already ran long yields to fresh ones of its class, and is the first victim among
    them). Checkpoint-then-preempt makes that cheap. Tuned (400 over 16 GPU-h; README,
    "Tuning": switching it off in the chosen draw made the tuning objective worse); kept below
    `preemption_margin` (800), it reorders a class and never lets a job preempt one of its own
    class. It may rank a job that ran 16 GPU-h or more below a day-old job of the class under it
    (1000 - 400 < 900), which may then start first, but never preempt it (the margin).

    With the defaults, a class step (1000) outweighs a full day of waiting (900), so aging lets a
    job overtake younger jobs of its own class and, after most of a day, the fresh jobs of the
    class below that have not run... never a fresh job of the class above; a job that suffered
    `history_cap` disruptions gains 60: it moves ahead inside its class, and a fresh job two
    classes up can still preempt it by the margin (2000 - 500 > 900 + 100 + 100 + 60). At 600, disrupted and
    aged low jobs outranked fresh high ones and could not be preempted by them (in a week of the
    Philly replay, `spotline simulate`: average JCT 4.1 h instead of 3.6 h).

    Fair-share also keeps a team that takes its quota back ahead of the jobs it preempted: they
    requeue with a disruption's bonus, and without the factor they outrank it and take the GPUs
    back (`tests/sim`: the reclaim scenario thrashes at weight 0). In the Philly replay (Oct 2-29,
    seed 1) the high class's p99 wait was 0.52 h at 400, 0.55 h at 100 and 0.57 h at 0.
    """

    model_config = ConfigDict(defer_build=True, frozen=True)

    class_step: float = 1000.0
    age: float = 900.0
    max_age_s: float = 24 * 3600.0
    deadline: float = 1500.0
    deadline_horizon_s: float = 6 * 3600.0
    size: float = 100.0
    size_norm_gpus: int = Field(default=64, gt=0)
    fairshare: float = 400.0
    history: float = 60.0
    history_cap: int = Field(default=3, gt=0)
    attained: float = Field(default=0.0, ge=0)
    attained_norm_gpu_h: float = Field(default=64.0, gt=0)
    shortest: float = Field(default=200.0, ge=0)
    shortest_norm_s: float = Field(default=72 * 3600.0, gt=0)
    # Strict class order (Slurm's QOS priority above its multifactor terms): each class step is
    # `class_step` plus the largest spread the within-class terms can make (`within_class_span`),
    # so aging, deadlines, fair-share and the rest order a class's jobs but never rank a job above
    # one of the class over it, for admission or preemption. Issue 29: without it, aged low jobs
    # took the GPUs that fresh high jobs waited for, and preempted their own class.
    strict_class_order: bool = True
    # Deadline lift (issue 30): a pending job whose deadline is still in reach (slack >= 0, slack =
    # deadline - now - its estimated remaining run time) with less than this much slack ranks as
    # one class up (`lifted`), never above `deadline_lift_ceiling`; 0: off. Under strict class
    # order the deadline term alone only orders a class, so a low job whose deadline was about to
    # become unreachable still waited behind every normal job. Off: in the Spot-pools benchmark
    # it missed 158 feasible deadlines of 1,109 at 2 h and 4 h against 163 without it, 7-12 more
    # GPU-hours lost, and the contended tuning set (no low-class deadline job) cannot choose its
    # threshold (docs/spot-and-deadlines.md, "Deadline lift"). The lift orders the queue only: a
    # lifted job keeps its declared class for `preempt_lower_class_only` and the reclaim policy
    # (it takes GPUs as they free, ahead of the class it is lifted into, and stops none of that
    # class's jobs), and a running job is never lifted (its score decides who is preempted, and
    # `score_floor` stays a floor). A job whose deadline is already out of reach is not lifted:
    # it would take GPUs and still miss.
    deadline_lift_slack_s: float = Field(default=0.0, ge=0)
    deadline_lift_ceiling: Priority = Priority.NORMAL

    @property
    def within_class_span(self) -> float:
        """The most by which the within-class terms can separate two jobs of one class: each
        term's weight (a negative weight counts by its size)."""
        terms = (self.age, self.deadline, self.size, self.fairshare, self.history, self.attained)
        return sum(abs(t) for t in terms) + abs(self.shortest)

    @property
    def effective_class_step(self) -> float:
        """The class term's step: `class_step`, plus `within_class_span` with `strict_class_order`."""
        return self.class_step + (self.within_class_span if self.strict_class_order else 0.0)

    def class_term(self, priority: Priority) -> float:
        """The class term of a job of `priority`."""
        return self.effective_class_step * priority.rank

    def lifted(self, priority: Priority, slack_s: float) -> Priority:
        """The class a pending job of `priority` with a deadline and `slack_s` seconds of slack
        ranks as: one class up while 0 <= slack < `deadline_lift_slack_s`, never above
        `deadline_lift_ceiling` (nor lowered by it); otherwise `priority`."""
        if not 0.0 <= slack_s < self.deadline_lift_slack_s:
            return priority
        rank = min(priority.rank + 1, self.deadline_lift_ceiling.rank)
        return priority if rank <= priority.rank else _BY_RANK[rank]

    def lift_ceiling_of(self, priority: Priority) -> Priority:
        """The highest class a job of `priority` with a deadline may rank as (`lifted`)."""
        return self.lifted(priority, 0.0)


class SchedulerConfig(BaseModel):
    """Policy of one Spotline deployment.

    The defaults of the weights' fair-share, attained-service and shortest-declared terms, the
    victim strategy, the protection period, the margin, the preemption delay and
    `fresh_checkpoint_s` were chosen by `python -m bench.tune` on the tuning set only (Philly
    2017-10-02..05 and synthetic traces of seeds 101-102; README, "Tuning"; the record is
    bench/data/tuning.txt): the best of 12 seeded draws, then that draw with the shortest-declared
    weight at each of 0, 200, 400 and 900, the Slurm peer given the same budget (its 12 draws, then
    its best with 1, 4, 16 and 64 backfill reservations). The best draw was draw 0, the defaults
    from before the tuning (once the victim strategies the simulator cannot evaluate faithfully
    were left out of the search, see `strategy`), and its refinement chose a shortest-declared
    weight of 200. The measurements quoted beside some fields below were taken before that
    tuning, on the window then used, and explain the mechanisms.
    """

    model_config = ConfigDict(defer_build=True, frozen=True)

    weights: PriorityWeights = Field(default_factory=PriorityWeights)
    # Tuned among the strategies the simulator evaluates as production runs them (least-lost-work
    # and random): `lowest-utilization` and `least-remaining-time` read what the agents report
    # (utilization, progress), which simulated jobs do not, so the tuning leaves them out
    # (bench/tune.py, `SIM_FAITHFUL_STRATEGIES`). Issue 29 chose the lowest class first on the
    # contended tuning counterparts (`python -m bench.contention --tuning --steps`): with it, lost
    # GPU-hours fell on 3 of 4 samples against least-lost-work alone (docs/contention.md).
    strategy: VictimStrategy = VictimStrategy.LOWEST_CLASS_LEAST_LOST_WORK
    # A job cannot be preempted within this many seconds of its last start.
    protection_period_s: float = Field(default=600.0, ge=0)
    # A job preempted this many times is not preempted again: a guard against thrash (the
    # protection period and `preemption_delay_s` already bound how often a job can be preempted).
    # Checkpoint-then-preempt costs a victim a checkpoint write and a restart (minutes). At 3, low
    # jobs preempted three times became unpreemptable and, in the Philly replay, held a quarter of
    # the GPUs while high jobs waited for hours; at 25, the high class's p99 wait (Oct 2-29, seed 1,
    # fair-share 100, a 6 h age cap) was 0.67 h, at 100 it was 0.54 h (no job reached 100).
    max_preemptions_per_job: int = Field(default=100, ge=0)
    # A victim must be below the preemptor by at least this much effective priority; it keeps
    # aging inside one class from preempting (and thrashing) jobs of the same class.
    preemption_margin: float = Field(default=500.0, ge=0)
    # Reclaiming borrowed quota: a lender gets its quota back from borrowers of a lower class
    # (Kueue's LowerPriority), and a borrowing team's critical job is not stopped for the
    # lender's low job. Reclaiming from the lender's own class too let two teams' jobs of one
    # class take the quota back from each other in turn (in a week of the Philly replay: three
    # times the preemptions and lost GPU-hours, and 5.1 h of average JCT instead of 4.1 h).
    reclaim_within_cohort: ReclaimPolicy = ReclaimPolicy.LOWER_PRIORITY
    # Seconds to restart a job (scheduling, image pull, loading the checkpoint): part of the
    # lost-work cost of a preemption.
    restart_cost_s: float = Field(default=120.0, ge=0)
    # Candidates examined per priority class in one pass (the head of each class's queue). A
    # job that fits can start only if it is in the window, so a head of jobs that do not fit
    # blocks the class: at 64, in the Philly replay's October backlog, low jobs waited 45 h at
    # p99 (17 h at 256) and average JCT was 12% longer. 256 items per class is still one
    # DynamoDB query page per class and pass.
    window_per_class: int = Field(default=256, gt=0)
    # Preemptions started in one pass, at most.
    max_preemptions_per_pass: int = Field(default=16, ge=0)
    # A job of a class not in `stop_at_once_for` preempts only once it has waited this long
    # since it was enqueued: running jobs finish all the time (half of Philly's jobs run under
    # 20 minutes), and a preemption costs each victim a checkpoint write and a restart on all its
    # GPUs. In the Philly replay (Oct 2-29, seed 1, 64 preemptions per pass, before the planner
    # shared victims' spare GPUs), 180 s instead of 0 halved the preemptions (24,456 -> 12,382) and
    # the GPU-hours they lose (2,281 -> 1,177). With the sharing, 60 s gives 11,136 preemptions and
    # 1,071 GPU-hours lost (Kueue: 2,566) at a high-class p99 wait of 0.52 h.
    preemption_delay_s: float = Field(default=60.0, ge=0)
    # Preemptors of these classes stop their victims at once instead of waiting for a checkpoint
    # write: the victims resume from their latest durable checkpoint (least-lost-work picks the
    # ones with the least unsaved work). For work that cannot wait the minute a write takes: in
    # the Philly replay (`make bench`), waiting for the write put the critical class's p99 wait
    # at 72 s, against 0 for the peers that stop victims at once.
    stop_at_once_for: frozenset[Priority] = frozenset({Priority.CRITICAL})
    # With it, a `stop_at_once_for` preemptor stops its victims at once only when each one's
    # unsaved work is no more than its checkpoint write (measured, else `checkpoint_write_s`):
    # stopping it then loses no more than the write would cost; otherwise the victims checkpoint
    # (without the preemption delay: `waives_preemption_delay`). Issue 29: stopping victims at
    # once was most of Spotline's excess lost work on the contended samples (docs/contention.md).
    stop_at_once_within_write: bool = True
    # Once a job finds no victim in a pass, jobs of lower classes do not preempt in that pass: the
    # GPUs that free up next go to the class above first (Slurm's main scheduler stops at the first
    # job that can neither start nor preempt; here per class). Issue 29: Spotline's normal jobs
    # preempted low ones far more often than Slurm's. Off: on the contended tuning set it lost
    # 3-13% less work but lengthened the high class's p99 wait on three of four samples
    # (docs/contention.md).
    preempt_below_blocked_class: bool = False
    # Preemption for the head of each class only (Slurm's main scheduler tries preemption for the
    # job at the top of its queue, not for every waiting job): in a pass, the first job of a class
    # that neither starts nor claims spare GPUs is its class's head; the class's jobs ranked after
    # it wait (`BehindClassHead`) instead of preempting. Issue 29: Spotline preempted far more
    # often than Slurm (not more expensively), every job of its window once past the delay. For
    # the normal class only (chosen on the contended tuning set, docs/contention.md): for every
    # class, it cut the lost work most, but the high class's p99 wait grew several-fold.
    preempt_for_class_head_only: frozenset[Priority] = frozenset({Priority.NORMAL})
    # Freed GPUs held for the top blocked gang: the first multi-node job of a pass that waits for
    # capacity has the free GPUs of its first candidate pool held for it (up to its demand), so
    # the jobs ranked after it cannot take them one by one while it waits (`planner._hold_for_gang`).
    # Issue 29: nothing held GPUs for a blocked gang; small jobs took On-Demand as it freed.
    # Off since the trace-driven Spot model (bench/data/contention_tuning_3.json, the contended
    # tuning set): with the hold, average JCT was met on 0 of 4 samples (mean 1.100x-1.124x the
    # best peer) and low-class JCT on 0-1; without it, with moves, on 2-3 of 4 (0.952x-0.967x).
    # It lost less work (mean 1.107x against 1.228x the best preempting peer, moves weighed at a
    # day) but met no lost-work row either way; goal rows met 7-10 with it, 10-13 without it with
    # moves (docs/contention.md).
    hold_for_blocked_gang: bool = False
    # The protection period does not shield a single-node job that started while a gang or a
    # critical job was waiting (it started after that job was queued, ahead of it): such a job
    # may be preempted for it at once (`preemption.backfilled_past`). Issue 29: arriving critical
    # jobs and blocked gangs found On-Demand held by small jobs still inside their protection.
    protect_backfill: bool = True
    # Classes that preempt without waiting `preemption_delay_s`, besides `stop_at_once_for`'s: a
    # critical preemptor whose victims checkpoint (`stop_at_once_for` without it) need not also
    # wait the delay (issue 29: on the contended samples, the delay was 63-76% of the critical
    # tail's wait once its victims checkpointed; docs/contention.md).
    no_preemption_delay_for: frozenset[Priority] = frozenset()
    # Who may preempt whom by class, as Slurm's QOS preempt lists decide it: on, a job preempts
    # only jobs of a lower class (the quota reclaim aside, as `reclaim_within_cohort` allows it),
    # besides being above them by the margin; aging, deadlines and fair-share order the queue
    # and a class's jobs but never let a job preempt one of its own class or a class above. Off:
    # the margin alone decides, and the age (900) and deadline (1,500) terms exceed it (500): on
    # the contended samples, jobs preempted their own class and the class above (docs/contention.md).
    preempt_lower_class_only: bool = True
    # Preempting at checkpoint boundaries: when every victim of a preemption made a durable
    # checkpoint at most this many seconds ago, they are stopped at once (they lose at most that
    # much work) instead of writing another checkpoint while the preemptor waits for it. With
    # least-lost-work the victims with the freshest checkpoints are picked first. 0: off.
    fresh_checkpoint_s: float = Field(default=0.0, ge=0)
    # Classes that go to On-Demand when their spot setting is `auto`.
    on_demand_classes: frozenset[Priority] = frozenset({Priority.CRITICAL})
    # Moving to Spot: a job that started On-Demand because Spot was full, and that may run on
    # Spot (`placement.spot_refusal`), is checkpointed and requeued to resume on Spot once a Spot
    # pool has room for it after a pass's own decisions, when its estimated remaining run time is
    # at least this long: the move costs a checkpoint write and a restart, and saves Spot's
    # discount on the rest of the run. Longest remaining first, within the pass's preemption
    # budget; never inside its protection period. 0: off. Issue 29: the cost per useful GPU-hour
    # rose with its first rules because Spot-capable jobs stayed On-Demand (on the long-running
    # tuning sample 9,754 On-Demand GPU-hours against 7,487 before them, 2,347 fewer on Spot).
    # 6 hours with the moves weighing the pool's history (below), under the trace-driven Spot
    # model (bench/data/contention_tuning_3.json): 13 goal rows met of 28 on the contended tuning
    # set, against 10 at a day and 11 for a day without the weighing (which lost 1.48x the best
    # preempting peer's work on average, against 1.26x). 0: off (6 rows: cost met nowhere).
    move_to_spot_min_remaining_s: float = Field(default=21600.0, ge=0)
    # Moves to Spot weigh the target pool's history (`move_value.move_value`): a job moves only
    # when Spot's saving on its remaining run exceeds the move's write and restart plus the
    # reclaims the pool's outages predict over that run (each a write, a restart and the mean
    # outage's wait). With less than `move_to_spot_min_history_s` of the pool seen (a day, the
    # deadline guard's thin-history bound; not tuned), the remaining-time threshold above decides
    # alone. Issue 29 under trace-driven Spot: moved jobs were reclaimed in the next bulk outage;
    # weighing cut the lost GPU-hours on the long-running tuning sample from 667.5 to 458.1 (a
    # day left; Slurm 326.4) and on the Philly one from 812.4 to 656.5 (docs/contention.md).
    move_to_spot_weighs_history: bool = True
    move_to_spot_min_history_s: float = Field(default=86400.0, ge=0)
    # After this many interruptions, a job with spot `auto` runs On-Demand (with
    # `spot_cost_aware`: only if Spot is expected to cost it more than On-Demand, see below).
    max_interruptions_on_spot: int = Field(default=2, ge=0)
    # A job with a deadline runs on Spot only if its slack covers this many times the expected
    # delay from interruptions (rate x remaining time x cost of one interruption).
    spot_slack_factor: float = Field(default=2.0, ge=0)
    # The deadline guard (`spotline.domain.deadline`): the restart a move between Spot and
    # On-Demand costs (the paper's 0.2 h: launch, image pull, checkpoint load), and the time to
    # the guard's next look at a job (a scheduling pass's cadence). A local demo shrinks both.
    deadline_changeover_s: float = Field(default=720.0, gt=0)
    deadline_step_s: float = Field(default=300.0, ge=0)
    # The deadline guard's plans a pass may solve (each up to ~0.3 s: docs/spot-and-deadlines.md):
    # the jobs that may ask one with the soonest deadlines get it, the others the guard's rules
    # this pass (its safety net keeps their deadlines). None: no bound (a pass may then solve one
    # per deadline job; the scheduler Lambda has 60 s).
    deadline_plans_per_pass: int | None = Field(default=16, ge=0)
    # What one interruption costs a job besides its restart: the agent checkpoints inside the
    # 2-minute Spot notice (architecture.md), so a checkpoint write (`checkpoint_write_s`); False
    # for an agent that cannot, whose job loses half a checkpoint interval on average.
    checkpoint_on_notice: bool = True
    checkpoint_write_s: float = Field(default=60.0, ge=0)
    # Spot-risk placement by expected cost (`placement.spot_refusal`): the interruption cap sends
    # a job On-Demand only when Spot's price x (remaining + expected interruption delay) is at
    # least On-Demand's price x remaining, with the job's own interruptions as evidence of the
    # rate; and a job whose deadline is already out of reach stays on (cheaper) Spot. False: the
    # count alone decides. In the high-churn scenario (one reclaim per 8 instance-hours), the
    # count alone sent interrupted jobs to On-Demand at three times the price (`make bench`).
    spot_cost_aware: bool = True
    # Run time assumed for a job that declares none and reports no progress.
    default_runtime_s: float = Field(default=3600.0, gt=0)
    # Half-life of the decayed GPU usage that fair-share compares between teams (Slurm's
    # PriorityDecayHalfLife, whose default is 7 days): `spotline.domain.usage`.
    usage_half_life_s: float = Field(default=7 * 24 * 3600.0, gt=0)

    def waives_preemption_delay(self, priority: Priority) -> bool:
        """A job of this class preempts without waiting `preemption_delay_s`."""
        return priority in self.stop_at_once_for or priority in self.no_preemption_delay_for
