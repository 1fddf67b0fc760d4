# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_fusebox_global_optspecs
    string join \n v/verbose h/help V/version
end

function __fish_fusebox_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_fusebox_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_fusebox_using_subcommand
    set -l cmd (__fish_fusebox_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c fusebox -n "__fish_fusebox_needs_command" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_needs_command" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_needs_command" -s V -l version -d 'Print version'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "mount" -d 'Mount an example filesystem (runs in the background unless -f)'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "umount" -d 'Unmount a fusebox (or any FUSE) mount'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "upgrade" -d 'Replace the server of a supervised mount without unmounting: the new one (this binary, or --binary) takes over once the old one has answered what it holds; if it fails, the old one goes on serving'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "stats" -d 'Per-request-type counts and latency histograms of a running mount'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "list" -d 'List the FUSE mounts of this machine'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "run" -d 'Run an unchanged libfuse 3 program (sshfs, squashfuse, ...) on fusebox\'s drop-in libfuse3.so.3: `fusebox run -- sshfs host:/ /mnt`'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "blk" -d 'Block devices served by user-space drivers (ram, file, null, timing): create, list, replace, destroy'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "bench" -d 'Run the papers\' workloads on native, fusebox and peer frameworks side by side, and write a report'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "doctor" -d 'What this kernel and machine offer fusebox (protocol, io_uring, passthrough, fusectl, user mounts, ...) and what to do about each missing piece'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "completions" -d 'Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "man" -d 'Write the man pages (fusebox.1 and one per command) into DIR'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "direct-server" -d 'The server of a direct-mode run whose filesystem keeps its state in its process (`fusebox run --fs memfs` starts it)'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "test-sshd" -d 'An OpenSSH server on loopback with throwaway keys in DIR, for scripts that test sftpfs (tests/pjdfstest.sh): writes DIR/ssh-options (the -o options that reach it) once it listens, and runs until stopped (SIGTERM, SIGINT), taking sshd with it'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "sftp-relay" -d 'An sshd\'s `Subsystem sftp` for the sftp bench: runs SERVER, passing its stream through and counting the requests by type into DIR/PID.counts'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "bench-worker" -d 'One workload of a suite, run in this process (the bench starts it under `fusebox run --fs` for the direct-mode subjects)'
complete -c fusebox -n "__fish_fusebox_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -s o -d 'Mount options, comma-separated (may repeat)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l threads -d 'Worker threads (default: number of CPUs, at least 2)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l transport -d 'classic (/dev/fuse), uring (FUSE-over-io_uring) or auto' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l queue-depth -d 'io_uring: ring entries per queue thread (default 8; 1 for a network filesystem, whose handlers wait out round trips: see --queue-threads)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l poll -d 'io_uring: how queue threads wait: off, spin=US, adaptive[=US] (spin up to US, 10 by default, only while recent waits were that short; with the adaptive thread policy a spinning thread is SCHED_IDLE and gives way to any other work at once). On a supervised io_uring mount, adaptive means off: the supervisor\'s SQ thread polls on the queue\'s CPU' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l queue-threads -d 'io_uring: threads per CPU queue, each with --queue-depth entries; the first is pinned, the rest are not. 2 with --queue-depth 1 lets one application thread\'s readahead be served two READs at a time. Default 1; 8 for a network filesystem (sftpfs), whose handlers wait out round trips, as its classic workers do' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l thread-policy -d 'Scheduling of the serving threads: adaptive (SCHED_IDLE while they never wait for a CPU, so an application woken by a reply stays on its CPU instead of waking a halted one; normal while they do wait and while the mount is idle; needs root or CAP_SYS_NICE, else normal); normal; or idle (always SCHED_IDLE: CPU-bound processes then starve the daemon); adaptive is normal for the queue threads of a supervised io_uring mount. See DESIGN.md' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l profile -d 'timingfs: latency profile (pmem, ssd, or NNus per 4 KiB)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l files -d 'timingfs: number of files' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l size -d 'timingfs: size of each file (bytes; K, M, G suffixes)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l latency -d 'timingfs: latency added to every request, e.g. 5ms or 500us (a remote server\'s round trip)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l waiting -d 'timingfs: how a request waits out --latency: block (holds its serving thread), token (answered later by a timer thread) or async (a tokio task, through the async API)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l max-pending -d 'Most requests answered later at once; a classic worker stops reading at the limit until one is answered' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l max-pending-bytes -d 'Most bytes (as the kernel sent them: WRITE data counts) held by requests answered later (K, M, G suffixes)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l fd-cache -d 'stackfs: most O_PATH fds kept open for nodes (default: the fd limit less a fifth of it, at least 1,024 spared; the soft limit is first raised to the hard one)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l log-file -d 'Where a background daemon writes its log (default: discarded)' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l max-restarts -d 'Recovery: most server deaths within --restart-window before the supervisor stops starting servers (requests then fail with EIO). Only servers that die before --settled-after count: a crash loop, not a server killed after it served' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l restart-window -d 'Recovery: the window --max-restarts counts deaths in (e.g. 30s)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l settled-after -d 'Recovery: a server that had served this long when it died is not counted against --max-restarts (e.g. 500ms)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l sq-idle -d 'Recovery over io_uring: how long the kernel thread that issues the supervisor\'s ring commands polls after work before it sleeps (e.g. 1ms; a sleeping one costs a wake-up per request)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -s f -l foreground -d 'Stay in the foreground (logs go to stderr)'
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l pin -d 'Pin classic worker threads to CPUs'
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l no-pin-queues -d 'io_uring: do not pin queue thread q to CPU q'
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l async-api -d 'Serve the filesystem through the async API (a tokio task per request, answered later), to try that path with any filesystem; pathfs goes through the path-level async API'
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l exclusive -d 'stackfs: SOURCE changes only through this mount, so names, attributes and failed lookups are cached for a day (passthrough_hp\'s default) instead of a second; `-o *_timeout=` still wins'
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l notify-ready -d 'Internal: tells a background child to report readiness on stdout'
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -l no-recovery -d 'Serve without a supervisor: a server that dies takes the mount with it (ENOTCONN until unmounted). By default stackfs and pathfs over classic /dev/fuse run under a supervisor that holds the mount and starts a new server when one dies, with no failed request; memfs runs under one too, for `fusebox upgrade` (its files go to the next server), but a crash loses its files: its requests then fail (EIO)'
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand mount" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fusebox -n "__fish_fusebox_using_subcommand umount" -l abort -d 'Abort the connection instead: pending requests fail with ENOTCONN. The way out when the daemon hangs'
complete -c fusebox -n "__fish_fusebox_using_subcommand umount" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand umount" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand upgrade" -l binary -d 'The fusebox binary to serve from now on (default: the one serving now)' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand upgrade" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand upgrade" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand stats" -l json -d 'Print the raw snapshot as JSON'
complete -c fusebox -n "__fish_fusebox_using_subcommand stats" -l histogram -d 'Also print each type\'s latency histogram'
complete -c fusebox -n "__fish_fusebox_using_subcommand stats" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand stats" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand list" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand list" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l fs -d 'Direct mode: serve this filesystem inside PROGRAM\'s own process (and the programs it runs) instead of running a libfuse program: stackfs:SRC, pathfs:SRC, nullfs, timingfs:PROFILE, timingfs-async:PROFILE (the same through the async API), memfs (its files live in its process: one instance in a server of the run\'s, which every process of the run reaches) or sftpfs:[user@]host:[dir] (one SSH connection and one cache for the run, in its server; -o takes its options, as `fusebox mount`\'s) or objfs:s3://BUCKET[/PREFIX] (one S3 client, cache and staging area for the run, in its server; -o as for `fusebox mount`)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l at -d 'Direct mode: where the filesystem appears to PROGRAM (need not exist)' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l intercept -d 'Direct mode: how system calls are caught. rewrite: each call site is rewritten into a direct call after its first call (needs a page at address 0: root, or vm.mmap_min_addr=0); dispatch: syscall user dispatch for every call (any user, about 10x the cost per call). Default: rewrite where this user can, else dispatch, said in one line' -r -f -a "rewrite\t''
dispatch\t''"
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l cache-entries -d 'Direct mode: paths whose attributes the metadata cache keeps per process (0: no cache)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l page-cache -d 'Direct mode: 4 KiB pages of file data kept per process (0: none, and for sftpfs none in the run\'s server either unless -o page_cache= says; default 16384 for nullfs and timingfs, none for stackfs and pathfs, whose reads reach the kernel\'s page cache of their source)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l transport -d 'Transport the program\'s mount is served over: classic, uring or auto (FUSEBOX_TRANSPORT)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l workers -d 'Worker threads of a multi-threaded loop (FUSEBOX_WORKERS)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l poll -d 'io_uring wait: off, spin=US or adaptive[=US] (FUSEBOX_POLL)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -s o -l options -d 'More `-o` options for the mount, after the program\'s own (FUSEBOX_OPTIONS); with --fs, the filesystem\'s options (sftpfs, objfs)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l library -d 'The drop-in library (default: beside this binary, or in ../lib/fusebox/; FUSEBOX_LIBFUSE3 names it too)' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l stats -d 'Direct mode: print the metadata cache\'s hits and misses when PROGRAM exits'
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l no-stats -d 'No `fusebox stats` socket for the mount (FUSEBOX_STATS=0)'
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -l no-readdirplus-lookups -d 'Never call the program\'s getattr inside a READDIRPLUS (as libfuse): listings the program fills without attributes then cost the kernel a LOOKUP per entry (FUSEBOX_READDIRPLUS_LOOKUPS=0)'
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand run" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and not __fish_seen_subcommand_from create list destroy replace help" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and not __fish_seen_subcommand_from create list destroy replace help" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and not __fish_seen_subcommand_from create list destroy replace help" -f -a "create" -d 'Create a block device served by a driver; prints the device (/dev/loopN, also /dev/fusebox/NAME) once it is ready'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and not __fish_seen_subcommand_from create list destroy replace help" -f -a "list" -d 'The devices fusebox serves'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and not __fish_seen_subcommand_from create list destroy replace help" -f -a "destroy" -d 'Detach a device and stop its driver (refused while it is mounted)'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and not __fish_seen_subcommand_from create list destroy replace help" -f -a "replace" -d 'Replace the driver process without an I/O error: a new one takes over once the old one has answered what it holds (or, with --kill, the old one is killed and the supervisor recovers)'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and not __fish_seen_subcommand_from create list destroy replace help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l driver -r -f -a "ram\t'Memory (kept by the supervisor: survives the driver process)'
file\t'An image file or a partition (--path), O_DIRECT where possible'
null\t'Reads zeros, drops writes: what the framework costs'
timing\t'A simulated SSD or HDD over memory (--profile)'"
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l size -d 'Size (bytes; K, M, G, T suffixes); a multiple of the block size. The file driver\'s default is the file\'s size' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l name -d 'The device\'s name (default: the driver\'s, numbered)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l block-size -d 'Logical block size: 512 or 4096 (any power of two in between)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l path -d 'file: the image or partition' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l profile -d 'timing: ssd, hdd, or a fixed latency per request (e.g. 200us)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l transport -d 'classic (/dev/fuse; replaceable, recovers from a crash) or uring (FUSE-over-io_uring; not replaceable on this kernel)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l threads -d 'Serving threads (classic; default: CPUs, at least 2) or threads per CPU queue (uring; default 1: a second one took 4 KiB reads at queue depth 1 from ~31,000 to ~27,000 per second, for no gain at depth 32)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l queue-depth -d 'io_uring: ring entries per queue thread (16 served queue depth 32 better than 32 or 64 did)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l max-restarts -d 'Recovery: most driver deaths within --restart-window before the supervisor stops starting drivers (I/O then fails with EIO)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l restart-window -d 'Recovery: the window --max-restarts counts deaths in, in seconds' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l log-file -d 'Where the background daemon writes its log (default: discarded)' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l read-only -d 'file: serve it read-only'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l no-recovery -d 'Serve without a supervisor: the device dies with its driver'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l buffered -d 'Let the loop device go through the page cache of the file instead of direct I/O (the file is direct either way)'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -s f -l foreground -d 'Stay in the foreground (logs to stderr)'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -l notify-ready
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from list" -l json -d 'As JSON'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from list" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from destroy" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from destroy" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from replace" -l binary -d 'The binary to serve from now on (default: the one serving)' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from replace" -l kill -d 'Kill the driver process (SIGKILL) instead of a planned handover: what a crash does'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from replace" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from replace" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from help" -f -a "create" -d 'Create a block device served by a driver; prints the device (/dev/loopN, also /dev/fusebox/NAME) once it is ready'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from help" -f -a "list" -d 'The devices fusebox serves'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from help" -f -a "destroy" -d 'Detach a device and stop its driver (refused while it is mounted)'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from help" -f -a "replace" -d 'Replace the driver process without an I/O error: a new one takes over once the old one has answered what it holds (or, with --kill, the old one is killed and the supervisor recovers)'
complete -c fusebox -n "__fish_fusebox_using_subcommand blk; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l suite -d 'Which suite to run' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l reps -d 'Repetitions per workload and subject (default: the suite\'s)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l filter -d 'Only workloads whose name contains one of these (comma-separated, e.g. objfs/stat,objfs/create)' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l backing -d 'Backing store: "tmpfs" (default) or a directory, e.g. one on ext4' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l libfuse-src -d 'A libfuse source tree (a clone of libfuse, 3.19 or master) to build passthrough_hp from for the libfuse io_uring peers; built into the work dir. Without it those peers are listed as unavailable' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l out -d 'Where results.json, report.md and charts/ go' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l baseline -d 'Builds, mountpoints and the tmpfs backing live here. Another fusebox build (a binary) to run beside this one: each fusebox subject again, served by it, named with a `-base` suffix and counted as a peer, so the report compares the two builds in one run' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l workdir -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l report-from -d 'Run nothing: render the report of a saved run (its results.json) again, e.g. after the report\'s text changed; with --publish, into docs/ under the saved run\'s suite' -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l quick -d 'Shorthand for --suite quick'
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l no-peers -d 'Skip building and running libfuse, fuser and go-fuse'
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -l publish -d 'Also write the report into this source tree\'s docs/: benchmarks.md (+ benchmarks/) for the `all` suite, benchmarks-SUITE.md otherwise'
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand bench" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand doctor" -l no-probe -d 'Do not mount anything: report only what files and sysfs say (the protocol version and the capabilities INIT offers stay unknown)'
complete -c fusebox -n "__fish_fusebox_using_subcommand doctor" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand doctor" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand completions" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand completions" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand man" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand man" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand direct-server" -l fs -d 'FS[:SOURCE], as `fusebox run --fs` took it' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand direct-server" -s o -d 'The filesystem\'s -o options' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand direct-server" -l door -d 'The door\'s descriptor, inherited' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand direct-server" -l detach -d 'Start the server in a process group of its own and return'
complete -c fusebox -n "__fish_fusebox_using_subcommand direct-server" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand direct-server" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand test-sshd" -l added-rtt-ms -d 'Reach it through the bench\'s delay proxy adding this many milliseconds of round trip' -r
complete -c fusebox -n "__fish_fusebox_using_subcommand test-sshd" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand test-sshd" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand sftp-relay" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand sftp-relay" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand bench-worker" -l suite -r
complete -c fusebox -n "__fish_fusebox_using_subcommand bench-worker" -l workload -r
complete -c fusebox -n "__fish_fusebox_using_subcommand bench-worker" -l dir -r -F
complete -c fusebox -n "__fish_fusebox_using_subcommand bench-worker" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides'
complete -c fusebox -n "__fish_fusebox_using_subcommand bench-worker" -s h -l help -d 'Print help'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "mount" -d 'Mount an example filesystem (runs in the background unless -f)'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "umount" -d 'Unmount a fusebox (or any FUSE) mount'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "upgrade" -d 'Replace the server of a supervised mount without unmounting: the new one (this binary, or --binary) takes over once the old one has answered what it holds; if it fails, the old one goes on serving'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "stats" -d 'Per-request-type counts and latency histograms of a running mount'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "list" -d 'List the FUSE mounts of this machine'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "run" -d 'Run an unchanged libfuse 3 program (sshfs, squashfuse, ...) on fusebox\'s drop-in libfuse3.so.3: `fusebox run -- sshfs host:/ /mnt`'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "blk" -d 'Block devices served by user-space drivers (ram, file, null, timing): create, list, replace, destroy'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "bench" -d 'Run the papers\' workloads on native, fusebox and peer frameworks side by side, and write a report'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "doctor" -d 'What this kernel and machine offer fusebox (protocol, io_uring, passthrough, fusectl, user mounts, ...) and what to do about each missing piece'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "completions" -d 'Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "man" -d 'Write the man pages (fusebox.1 and one per command) into DIR'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "direct-server" -d 'The server of a direct-mode run whose filesystem keeps its state in its process (`fusebox run --fs memfs` starts it)'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "test-sshd" -d 'An OpenSSH server on loopback with throwaway keys in DIR, for scripts that test sftpfs (tests/pjdfstest.sh): writes DIR/ssh-options (the -o options that reach it) once it listens, and runs until stopped (SIGTERM, SIGINT), taking sshd with it'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "sftp-relay" -d 'An sshd\'s `Subsystem sftp` for the sftp bench: runs SERVER, passing its stream through and counting the requests by type into DIR/PID.counts'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "bench-worker" -d 'One workload of a suite, run in this process (the bench starts it under `fusebox run --fs` for the direct-mode subjects)'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and not __fish_seen_subcommand_from mount umount upgrade stats list run blk bench doctor completions man direct-server test-sshd sftp-relay bench-worker help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and __fish_seen_subcommand_from blk" -f -a "create" -d 'Create a block device served by a driver; prints the device (/dev/loopN, also /dev/fusebox/NAME) once it is ready'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and __fish_seen_subcommand_from blk" -f -a "list" -d 'The devices fusebox serves'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and __fish_seen_subcommand_from blk" -f -a "destroy" -d 'Detach a device and stop its driver (refused while it is mounted)'
complete -c fusebox -n "__fish_fusebox_using_subcommand help; and __fish_seen_subcommand_from blk" -f -a "replace" -d 'Replace the driver process without an I/O error: a new one takes over once the old one has answered what it holds (or, with --kill, the old one is killed and the supervisor recovers)'
