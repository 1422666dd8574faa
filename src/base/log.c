/* log.c: routes library messages to the program's callback (pv_set_log); none by default. */
#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

/* fn and user change together under the writer's release store; readers take both through one
 * acquire load of the struct pointer, so a message never reaches a callback with another's data. */
struct sink {
	pv_log_fn fn;
	void* user;
	int level;
};
static struct sink sinks[2];
static _Atomic(struct sink*) cur;
static atomic_int which;

void pv_set_log(pv_log_fn fn, void* user, int max_level)
{
	int w = atomic_fetch_xor(&which, 1) ^ 1;
	sinks[w] = (struct sink){ fn, user, max_level };
	atomic_store_explicit(&cur, fn ? &sinks[w] : NULL, memory_order_release);
}

int pv_log_enabled(int level)
{
	struct sink* s = atomic_load_explicit(&cur, memory_order_acquire);
	return s && level <= s->level;
}

void pv_log(int level, const char* fmt, ...)
{
	struct sink* s = atomic_load_explicit(&cur, memory_order_acquire);
	if (!s || level > s->level) return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	s->fn(s->user, level, line);
}
