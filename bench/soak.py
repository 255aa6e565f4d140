"""The soak benchmark: `python bench/soak.py [--target sim|sysfs|both] [--cycles 10000] [--interval 0.1]`.

The machinery lives in fabricmon.sim.soak (the CI form in tests/test_soak.py uses it too); see
its docstring for what is measured and the tolerances.
"""

import sys

from fabricmon.sim.soak import main

if __name__ == "__main__":
    sys.exit(main())
