"""The control plane's services through their handlers (submission and the API, the scheduling
pass, the events from Batch, EC2 and the agent, the reconciler, arrays and pipelines, deadlines),
in memory: the integration tests of those services, each run here on `spotline.control.memory`
as well as on moto in `tests/integration`. The stores' contract suite
(`tests/integration/test_store_contract.py`) holds the two stores to the same behaviour.

Left out here (they run on moto only): the tests that reach into DynamoDB themselves (the read
count of a pass, array writes failed by patching the DynamoDB adapter, ledger counters written
with DynamoDB's client), and the tests of adapters rather than services (the local HTTP server,
the CloudWatch and file log readers). The modules that build their own moto deployment are not
imported."""

from __future__ import annotations

from tests.integration.test_agent_without_run import *  # noqa: F403
from tests.integration.test_api import *  # noqa: F403
from tests.integration.test_api_refusals import *  # noqa: F403
from tests.integration.test_arrays_pipelines import *  # noqa: F403
from tests.integration.test_batch_failures import *  # noqa: F403
from tests.integration.test_checkpoint_cost import *  # noqa: F403
from tests.integration.test_deadline_guard_explain import *  # noqa: F403
from tests.integration.test_deadline_guard_moves import *  # noqa: F403
from tests.integration.test_deadline_plan_pass import *  # noqa: F403
from tests.integration.test_event_handlers import *  # noqa: F403
from tests.integration.test_explain_api import *  # noqa: F403
from tests.integration.test_faults_runs import *  # noqa: F403
from tests.integration.test_gang_nodes import *  # noqa: F403
from tests.integration.test_history_export import *  # noqa: F403
from tests.integration.test_job_logs import *  # noqa: F403
from tests.integration.test_orphan_races import *  # noqa: F403
from tests.integration.test_pools_history_api import *  # noqa: F403
from tests.integration.test_rebalance_risk import *  # noqa: F403
from tests.integration.test_reconciler import *  # noqa: F403
from tests.integration.test_scheduling_pass import *  # noqa: F403
from tests.integration.test_spot_pool_history import *  # noqa: F403

del (
    test_a_pass_reads_the_same_bounded_number_of_items_at_2k_and_10k_pending_jobs,  # noqa: F821
    test_a_retry_completes_an_array_a_failure_cut_short,  # noqa: F821
    test_a_cut_short_array_without_a_key_can_be_cancelled,  # noqa: F821
    test_a_repair_loses_to_a_counter_that_moved_after_the_read,  # noqa: F821
    test_the_same_drift_after_an_admission_and_a_release_is_marked_again_not_repaired,  # noqa: F821
    test_a_counter_item_that_is_missing_is_repaired_too,  # noqa: F821
    test_the_local_server_refuses_the_same_way,  # noqa: F821
    test_cloudwatch_reader_finds_the_runs_stream_and_pages_forward,  # noqa: F821
    test_file_reader_pages_whole_lines_and_tails,  # noqa: F821
)
