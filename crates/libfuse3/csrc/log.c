/* fuse_log and fuse_set_log_func (fuse_log.h, FUSE_3.7). They are here in C
   because fuse_log is variadic and the log function a program installs
   takes a va_list, neither of which stable Rust can define. The library's
   own messages (src/ffi) reach the same function through
   fusebox_log_message, so a program that installs a log function sees
   them too, as with libfuse. */
#include <stdarg.h>
#include <stdio.h>

typedef void (*log_func_t)(int level, const char *fmt, va_list ap);

static void to_stderr(int level, const char *fmt, va_list ap)
{
	(void) level;
	vfprintf(stderr, fmt, ap);
}

static log_func_t current = to_stderr;

void fuse_set_log_func(log_func_t func)
{
	current = func ? func : to_stderr;
}
__asm__(".symver fuse_set_log_func, fuse_set_log_func@@FUSE_3.7");

void fuse_log(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	current(level, fmt, ap);
	va_end(ap);
}
__asm__(".symver fuse_log, fuse_log@@FUSE_3.7");

/* One finished message (with its newline) from the Rust side. */
void fusebox_log_message(int level, const char *msg)
{
	fuse_log(level, "%s", msg);
}
