"""Draws how kubefold's cost grows with the number of pods, from the
benchmark driver's JSON (raw.curve): list and get latency, RSS, disk per
object and initial sync, each beside its reference; then the watch fan-out's
delivery latency per case (raw.watch) and the warm restarts (raw.restartN).
Usage: plot.py latest.json plot.png"""

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
    fig, axes = plt.subplots(4, 2, figsize=(12, 17))
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

    ax = axes[2][0]
    ax.plot(pods, [p["syncSeconds"] for p in curve], "o-", label="kubefold: spawn to /readyz")
    refs = [(p["pods"], p["sledInsertSeconds"]) for p in curve if p.get("sledInsertSeconds") is not None]
    if refs:
        ax.plot([r[0] for r in refs], [r[1] for r in refs], "^--", label="sled batch insert, same records")
    ax.axhline(60, color="red", linewidth=0.8, linestyle=":", label="target at 1M: 60 s")
    ax.set_title("initial sync")
    ax.set_ylabel("s")

    curve_axes = [axes[0][0], axes[0][1], axes[1][0], axes[1][1], axes[2][0]]
    for ax in curve_axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("pods (over {} members)".format(doc.get("plan", {}).get("sims")))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)

    watch_panel(axes[2][1], doc.get("raw", {}).get("watch"))
    restart_panel(axes[3][0], doc.get("raw", {}))
    axes[3][1].axis("off")
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(dst, dpi=110)


def watch_panel(ax, watch) -> None:
    """Delivery latency of each watch case, p50 and p99, from the member's
    own watch event to the client (the run's watch phase)."""
    cases = (watch or {}).get("cases") or []
    if not cases:
        ax.text(0.5, 0.5, "no watch phase in this run", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    names = ["{}\n({} clients)".format(c["case"], c["clients"]) for c in cases]
    lat = [c.get("latencyFromMemberWatch") or {} for c in cases]
    x = range(len(cases))
    ax.bar([i - 0.2 for i in x], [l.get("p50", 0) for l in lat], width=0.4, label="p50")
    ax.bar([i + 0.2 for i in x], [l.get("p99", 0) for l in lat], width=0.4, label="p99")
    ax.set_xticks(list(x))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_title("watch: member's event to client, {:.0f} events/s".format(cases[0].get("eventsPerSecond", 0)))
    ax.set_ylabel("ms")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def restart_panel(ax, raw) -> None:
    """Each warm restart of the run: seconds to listening, to the first list
    served, and to /readyz."""
    restarts = sorted(((int(k[len("restart"):]), v) for k, v in raw.items() if k.startswith("restart") and k[len("restart"):].isdigit()))
    if not restarts:
        ax.text(0.5, 0.5, "no restart phase in this run", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    x = range(len(restarts))
    for offset, key, label in [(-0.27, "listenSeconds", "listening"), (0, "firstListSeconds", "first list served"), (0.27, "readySeconds", "/readyz 200")]:
        ax.bar([i + offset for i in x], [r.get(key) or 0 for _, r in restarts], width=0.27, label=label)
    ax.axhline(5, color="red", linewidth=0.8, linestyle=":", label="target at 1M: first list < 5 s")
    ax.set_xticks(list(x))
    ax.set_xticklabels(["{:,} objects".format(r.get("objectsAfter") or n) for n, r in restarts], fontsize=8)
    ax.set_title("warm restart")
    ax.set_ylabel("s")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
