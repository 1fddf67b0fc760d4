/*
 * What a create costs in the system calls stackfs itself must make, with
 * no direct-mode overhead at all, against a native create: the floor under
 * direct mode's create rate on stackfs (DESIGN.md, "Direct mode").
 *
 *   gcc -O2 scripts/direct-create-floor.c -o /tmp/create-floor
 *   d=$(mktemp -d /dev/shm/floor.XXXX); /tmp/create-floor native $d; rm -rf $d
 *   d=$(mktemp -d /dev/shm/floor.XXXX); /tmp/create-floor stackfs $d; rm -rf $d
 *   d=$(mktemp -d /dev/shm/floor.XXXX); /tmp/create-floor stackfs-lookup $d; rm -rf $d
 *
 * Each creates 10,000 files in the directory (open O_CREAT|O_TRUNC, a
 * 16-byte write, close, as `fusebox bench`'s create workload does) and
 * prints microseconds per file. "stackfs" adds what stackfs's create
 * needs beside the native calls: the created file's attributes (fstat)
 * and its file handle (name_to_handle_at); "stackfs-lookup" also the
 * negative lookup (fstatat) before it, which direct mode made until it
 * learnt to ask stackfs's create at once (Filesystem::
 * create_opens_existing). Syscall user dispatch is switched on (all calls
 * allowed), as it is in direct mode, since it slows every system call.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#endif

static char selector; /* 0: SYSCALL_DISPATCH_FILTER_ALLOW */

static double seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	int lookup = argc == 3 && !strcmp(argv[1], "stackfs-lookup");
	int stackfs = argc == 3 && (lookup || !strcmp(argv[1], "stackfs"));
	if (argc != 3 || (!stackfs && strcmp(argv[1], "native"))) {
		fprintf(stderr, "usage: %s native|stackfs|stackfs-lookup EMPTY-DIR\n", argv[0]);
		return 2;
	}
	int dir = open(argv[2], O_PATH | O_DIRECTORY);
	if (dir < 0) {
		perror(argv[2]);
		return 1;
	}
	if (prctl(PR_SET_SYSCALL_USER_DISPATCH, 1, 0, 0, &selector))
		perror("syscall user dispatch (measuring without it)");
	const int files = 10000;
	char name[32], data[16];
	memset(data, 'x', sizeof data);
	struct stat st;
	struct {
		unsigned int bytes;
		int type;
		unsigned char handle[128];
	} fh;
	int mount_id;
	double start = seconds();
	for (int i = 0; i < files; i++) {
		snprintf(name, sizeof name, "f%d", i);
		if (lookup)
			fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW);
		int fd = openat(dir, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0) {
			perror(name);
			return 1;
		}
		if (stackfs) {
			fstat(fd, &st);
			fh.bytes = sizeof fh.handle;
			syscall(SYS_name_to_handle_at, fd, "", &fh, &mount_id, AT_EMPTY_PATH);
		}
		if (write(fd, data, sizeof data) != sizeof data)
			return 1;
		close(fd);
	}
	printf("%s: %.2f us per create\n", argv[1], (seconds() - start) / files * 1e6);
	return 0;
}
