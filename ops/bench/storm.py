#!/usr/bin/env python3
"""Watch replay storm: CLIENTS watches resume at once from BACK events before
the head of a kubefold serving two simulated members (2,000 pods each), as
informers do after a restart. Prints one JSON line: the seconds until every
client holds every replayed event, kubefold's CPU seconds meanwhile (from
/proc), and its RSS before and after.

    ops/bench/storm.py target/release/kubefold 1000 300

Every process it starts is killed at the end; the data dir is a temp dir.
"""
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ADDRESS = re.compile(r"(http://127\.0\.0\.1:\d+)")


def spawn(procs, args):
    """Starts a process and returns it with the first loopback URL it prints."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    procs.append(proc)
    for line in proc.stdout:
        found = ADDRESS.search(line)
        if found:
            return proc, found.group(1)
    raise SystemExit(f"{args[1]} printed no address")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    return 0


async def watch(host, port, start_rv, events, done):
    """One client: reads until it has seen `events` watch events."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET /api/v1/pods?watch=1&resourceVersion={start_rv} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    await writer.drain()
    seen, tail = 0, b""
    while seen < events:
        chunk = await reader.read(1 << 16)
        if not chunk:
            break
        data = tail + chunk
        seen += data.count(b'{"type":"')
        tail = data[-16:]
    done.append(time.time())
    writer.close()


def main():
    binary, clients, back = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    procs, data = [], tempfile.mkdtemp(prefix="kubefold-storm-")
    try:
        members = [spawn(procs, [binary, "sim", "--name", f"member{i}", "--workload", "empty", "--pods", "2000"])[1] for i in (1, 2)]
        clusters = sum((["--cluster", f"member{i + 1}={url}"] for i, url in enumerate(members)), [])
        kubefold, url = spawn(procs, [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(data, "data")] + clusters)

        def get(path):
            return json.load(urllib.request.urlopen(url + path, timeout=30))

        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if len(get("/api/v1/pods?limit=5000")["items"]) >= 4000:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit("kubefold did not sync the members' pods in 120 s")
        time.sleep(1)
        head = int(get("/api/v1/pods?limit=1")["metadata"]["resourceVersion"])
        host, port = url[len("http://"):].split(":")

        async def storm():
            done = []
            await asyncio.gather(*(watch(host, int(port), head - back, back, done) for _ in range(clients)))
            return done

        cpu0, rss0, t0 = cpu_seconds(kubefold.pid), rss_mib(kubefold.pid), time.time()
        done = asyncio.run(storm())
        print(json.dumps({
            "clients": clients, "replayed": back, "complete": len(done),
            "seconds": round(max(done) - t0, 3),
            "kubefoldCpuSeconds": round(cpu_seconds(kubefold.pid) - cpu0, 3),
            "rssBeforeMiB": rss0, "rssAfterMiB": rss_mib(kubefold.pid),
        }))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
