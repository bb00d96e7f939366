"""Child of subprocess_run_stdin: reads the stdin it inherited, which never closes."""
import sys
import hw
hw.ready("child")
answer = sys.stdin.readline()
