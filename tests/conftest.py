import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# AXIAL_FUSED_TEST_TIMES=PATH: each test's duration appended to PATH as it finishes ("seconds nodeid"),
# so that a run cut short by a time limit (scripts/device_run.sh validate) still says where its time went.
_TIMES = os.environ.get("AXIAL_FUSED_TEST_TIMES")


def pytest_runtest_logreport(report):
    if _TIMES and (report.when == "call" or (report.when == "setup" and report.skipped)):
        with open(_TIMES, "a") as f:
            f.write(f"{report.duration:.2f} {report.nodeid}\n")
