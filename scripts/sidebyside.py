#!/usr/bin/env python3
"""Quick side-by-side: native tmpfs vs libfuse passthrough_ll vs fusebox stackfs
(classic /dev/fuse, FUSE-over-io_uring, io_uring + passthrough).

Subjects are interleaved (A B C A B C ...) and each workload repeated; the
report gives medians and ratios to native measured in this one run. The
full benchmark tool (`fusebox bench`) comes later; this is the demo.
"""
import json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUSEBOX = os.path.join(ROOT, "target/release/fusebox")
PASSTHROUGH_LL = os.path.join(ROOT, "target/peers/passthrough_ll")
REPS = int(os.environ.get("REPS", "3"))
RUNTIME = os.environ.get("RUNTIME", "5")
NFILES = int(os.environ.get("NFILES", "10000"))


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def wait_mounted(path, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        with open("/proc/self/mountinfo") as f:
            if any(l.split()[4] == path for l in f):
                return
        time.sleep(0.02)
    raise RuntimeError(f"{path} did not mount")


def fio_randread(d, jobs):
    out = subprocess.run([
        "fio", "--name=rr", f"--directory={d}", "--filename=data", "--rw=randread", "--bs=4k",
        "--direct=1", "--ioengine=psync", f"--numjobs={jobs}", "--size=256m", f"--runtime={RUNTIME}",
        "--time_based", "--group_reporting", "--output-format=json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["jobs"][0]["read"]["iops"]


def files(d, phase):
    base = os.path.join(d, "files")
    t = time.perf_counter()
    if phase == "create":
        os.makedirs(base, exist_ok=True)
        for i in range(NFILES):
            fd = os.open(os.path.join(base, f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, b"x" * 16)
            os.close(fd)
    elif phase == "stat":
        for i in range(NFILES):
            os.stat(os.path.join(base, f"f{i}"))
    else:
        for i in range(NFILES):
            os.unlink(os.path.join(base, f"f{i}"))
    return NFILES / (time.perf_counter() - t)


def main():
    work = tempfile.mkdtemp(prefix="fusebox-demo-")
    native = os.path.join(work, "native")
    os.mkdir(native)
    sh("mount", "-t", "tmpfs", "-o", "size=2g", "tmpfs", native)
    uring = open("/sys/module/fuse/parameters/enable_uring").read().strip() == "Y"
    variants = {"fusebox": ["--transport", "classic"]}
    if uring:
        variants["fb-uring"] = ["--transport", "uring"]
        variants["fb-uring+pt"] = ["--transport", "uring", "-o", "passthrough"]
    else:
        print("io_uring subjects skipped: enable_uring is off")
    mounts = {"libfuse": os.path.join(work, "libfuse")}
    mounts.update({name: os.path.join(work, name) for name in variants})
    for m in mounts.values():
        os.mkdir(m)
    procs = []
    try:
        for name, args in variants.items():
            sh(FUSEBOX, "mount", "stackfs", native, mounts[name], "-o", "allow_other", *args, stdout=subprocess.DEVNULL)
        procs.append(subprocess.Popen([PASSTHROUGH_LL, "-f", "-o", f"source={native},allow_other", mounts["libfuse"]],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_mounted(mounts["libfuse"])
        subjects = {"native": native, **mounts}
        sh("fio", "--name=prep", f"--directory={native}", "--filename=data", "--size=256m", "--rw=write", "--bs=1m",
           stdout=subprocess.DEVNULL)
        results = {}
        workloads = [("4K O_DIRECT randread, 1 thread", lambda d: fio_randread(d, 1)),
                     ("4K O_DIRECT randread, 2 threads", lambda d: fio_randread(d, 2)),
                     (f"create {NFILES} files", lambda d: files(d, "create")),
                     (f"stat {NFILES} files", lambda d: files(d, "stat")),
                     (f"unlink {NFILES} files", lambda d: files(d, "unlink"))]
        for rep in range(REPS):
            for wname, fn in workloads[:2]:
                for sname, d in subjects.items():
                    results.setdefault(wname, {}).setdefault(sname, []).append(fn(d))
                    print(f"  rep {rep + 1}/{REPS} {wname:<34} {sname:<8} {results[wname][sname][-1]:>12,.0f} ops/s", flush=True)
            for sname, d in subjects.items():
                for wname, fn in workloads[2:]:
                    results.setdefault(wname, {}).setdefault(sname, []).append(fn(d))
                    print(f"  rep {rep + 1}/{REPS} {wname:<34} {sname:<8} {results[wname][sname][-1]:>12,.0f} ops/s", flush=True)
        print(f"\nMedians of {REPS} interleaved runs (ops/s; ratio to native in brackets)\n")
        names = ["libfuse"] + list(variants)
        print(f"{'workload':<34} {'native':>11} " + " ".join(f"{n:>20}" for n in names))
        for wname, per in results.items():
            med = {s: statistics.median(v) for s, v in per.items()}
            n = med["native"]
            cells = [f"{med[s]:>11,.0f} ({med[s] / n:.2f})" for s in names]
            print(f"{wname:<34} {n:>11,.0f} " + " ".join(f"{c:>20}" for c in cells))
        print("\n(libfuse = Debian's libfuse 3.14 passthrough_ll, multithreaded; fusebox = stackfs)")
        last = list(variants)[-1]
        print(f"\nfusebox stats of the {last} mount:\n")
        sh(FUSEBOX, "stats", mounts[last])
        with open(os.path.join(ROOT, "target/sidebyside.json"), "w") as f:
            json.dump(results, f, indent=1)
    finally:
        for p in procs:
            subprocess.run(["umount", "-l", mounts["libfuse"]])
            p.wait(timeout=10)
        for name in variants:
            subprocess.run([FUSEBOX, "umount", mounts[name]])
        time.sleep(0.2)
        subprocess.run(["umount", "-l", native])
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    sys.exit(main())
