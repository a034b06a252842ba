"""Run by the UNPRIVILEGED node user: plant run/perftest/.<ip>_<port>.result.json.<pid> -> TARGET
for the next COUNT pids (the name a sudo'ed perftest client once wrote its result through).
Usage: perftest_plant.py TARGET IP:PORT COUNT"""
import os
import sys

run = os.path.join(os.environ["FABTUNE_LAB_DIR"], "run", "perftest")
try:
    first = int(open("/proc/sys/kernel/ns_last_pid").read())
except OSError:
    first = os.getpid()
pid_max = int(open("/proc/sys/kernel/pid_max").read())
ip, port = sys.argv[2].split(":")
n = 0
for pid in range(first, min(first + int(sys.argv[3]), pid_max + 1)):
    try:
        os.symlink(sys.argv[1], os.path.join(run, f".{ip}_{port}.result.json.{pid}"))
        n += 1
    except FileExistsError:
        pass
print("PLANTED", n)
