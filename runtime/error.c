/*
 * error.c - error codes, their names and strings, and the per-thread
 * message behind dr_last_error().
 *
 * The enum and both string tables come from DR_ERR_MAP in distrun.h, so a
 * code cannot lack its name or its message.  The library never prints: a
 * failing call records what went wrong here (dri_fail) and returns the code,
 * and the program decides what to show.  The message lives in thread-local
 * storage so that the progress thread's failures do not overwrite the
 * caller's (a work handle keeps its own copy, see group.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "error.h"

#define DRI_MSG_MAX 1024

static _Thread_local char last_error[DRI_MSG_MAX];

static const char *const err_strings[] = {
#define XX(name, msg) msg,
	DR_ERR_MAP(XX)
#undef XX
};

static const char *const err_names[] = {
#define XX(name, msg) "DR_" #name,
	DR_ERR_MAP(XX)
#undef XX
};

const char *dr_strerror(dr_err err)
{
	if ((unsigned)err >= DR_ERR_COUNT_)
		return "unknown error";
	return err_strings[err];
}

const char *dr_err_name(dr_err err)
{
	if ((unsigned)err >= DR_ERR_COUNT_)
		return "DR_UNKNOWN";
	return err_names[err];
}

const char *dr_last_error(void)
{
	return last_error;
}

dr_err dri_fail(dr_err err, const char *fmt, ...)
{
	char tmp[DRI_MSG_MAX];
	va_list ap;

	/* fmt may print dr_last_error() itself, to add context to a lower
	 * layer's message: format into a copy first. */
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	memcpy(last_error, tmp, sizeof(tmp));
	return err;
}

void dri_set_last_error(const char *msg)
{
	snprintf(last_error, sizeof(last_error), "%s", msg ? msg : "");
}

static const char *const coll_names[DRI_COLL_COUNT_] = {
	[DRI_BARRIER] = "barrier",
	[DRI_ALL_REDUCE] = "all_reduce",
	[DRI_BROADCAST] = "broadcast",
	[DRI_REDUCE] = "reduce",
	[DRI_ALL_GATHER] = "all_gather",
	[DRI_GATHER] = "gather",
	[DRI_SCATTER] = "scatter",
	[DRI_REDUCE_SCATTER] = "reduce_scatter",
	[DRI_ALL_TO_ALL] = "all_to_all",
	[DRI_ALL_TO_ALL_V] = "all_to_all_v",
	[DRI_MONITORED_BARRIER] = "monitored_barrier",
	[DRI_NEW_GROUP] = "new_group",
	[DRI_P2P] = "send/recv",
};

const char *dri_coll_name(dri_coll coll)
{
	if ((unsigned)coll >= DRI_COLL_COUNT_ || !coll_names[coll])
		return "unknown";
	return coll_names[coll];
}

const char *dri_strerror(int e)
{
	static _Thread_local char buf[4][160];
	static _Thread_local unsigned next;
	char *b = buf[next++ % 4];
	struct rlimit rl;

	if (e == EMFILE && !getrlimit(RLIMIT_NOFILE, &rl)) {
		snprintf(b, sizeof(buf[0]), "%s (this process's open file "
			 "limit, ulimit -n, is %llu)", strerror(e),
			 (unsigned long long)rl.rlim_cur);
		return b;
	}
	if (e == ENFILE) {
		snprintf(b, sizeof(buf[0]), "%s (the system's, "
			 "/proc/sys/fs/file-max)", strerror(e));
		return b;
	}
	return strerror(e);
}
