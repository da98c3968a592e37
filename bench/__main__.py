"""`make bench`: the scheduling pass's speed, then the policies side by side on the Philly trace."""

from __future__ import annotations

import sys


def main() -> int:
    from bench import plan_bench

    plan_bench.main()
    try:
        from bench import policy_bench
    except ImportError as error:  # the simulator bench lands separately
        print(f"policy bench unavailable: {error}", file=sys.stderr)
        return 0
    policy_bench.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
