"""Draws how kubefold's cost grows with the number of pods, from the
benchmark driver's JSON (raw.curve): list and get latency, RSS, disk per
object, each beside its reference. Usage: plot.py latest.json plot.png"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    with open(src) as f:
        doc = json.load(f)
    curve = sorted(doc.get("raw", {}).get("curve", []), key=lambda p: p["pods"])
    if not curve:
        print("no size steps in", src, file=sys.stderr)
        sys.exit(1)
    pods = [p["pods"] for p in curve]
    mib = 1024 * 1024
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    machine = doc.get("machine", {})
    fig.suptitle(
        "kubefold cost vs pods ({} mode, {} cores, {} GiB, load average {} at the start; {})".format(
            doc.get("mode"),
            machine.get("nproc"),
            machine.get("memoryGiB"),
            str(machine.get("loadAverageAtStart", "?")).split(" ")[0],
            doc.get("startedAt", ""),
        ),
        fontsize=11,
    )

    ax = axes[0][0]
    ax.plot(pods, [p["listP50"]["kubefold"] for p in curve], "o-", label="kubefold list JSON p50")
    tables = [(p["pods"], p["tableP50"]) for p in curve if p.get("tableP50") is not None]
    if tables:
        ax.plot([t[0] for t in tables], [t[1] for t in tables], "s-", label="kubefold list Table p50")
    ax.plot(pods, [p["listP50"]["members"] for p in curve], "^--", label="members directly, one by one")
    ax.plot(pods, [p["listP50"]["limit"] for p in curve], "v:", label="same bytes from memory (limit)")
    ax.set_title("list all pods: latency")
    ax.set_ylabel("ms")

    ax = axes[0][1]
    ax.plot(pods, [p["getP50"] for p in curve], "o-", label="kubefold get p50")
    ax.plot(pods, [p["getP99"] for p in curve], "s-", label="kubefold get p99")
    ax.plot(pods, [p["membersGetP50"] for p in curve], "^--", label="members get p50")
    ax.plot(pods, [p["membersGetP99"] for p in curve], "v--", label="members get p99")
    ax.set_title("get by name at 1,000 req/s")
    ax.set_ylabel("ms")

    ax = axes[1][0]
    ax.plot(pods, [p["rssAfterSync"] / mib for p in curve], "o-", label="kubefold RSS after sync")
    ax.plot(pods, [p["rssHwm"] / mib for p in curve], "s-", label="kubefold RSS high-water (with lists)")
    ax.plot(pods, [p["membersRss"] / mib for p in curve], "^--", label="members' RSS (sum)")
    ax.axhline(2e9 / mib, color="red", linewidth=0.8, linestyle=":", label="target at 1M: 2 GB")
    ax.set_title("memory")
    ax.set_ylabel("MiB")

    ax = axes[1][1]
    ax.plot(pods, [p["diskPerObject"] for p in curve], "o-", label="kubefold data dir / pods")
    ax.plot(pods, [p["sledDiskPerObject"] for p in curve], "^--", label="raw sled, same records")
    ax.plot(pods, [p["jsonSize"] for p in curve], "v:", label="pod JSON size")
    ax.set_title("disk per object")
    ax.set_ylabel("bytes")

    for row in axes:
        for ax in row:
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("pods (over {} members)".format(doc.get("plan", {}).get("sims")))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
