/*
 * group.c - process groups, the order of calls on them, the progress
 * thread and dr_work handles.
 *
 * A blocking call runs its algorithm on the caller's thread: handing it to
 * another thread and waiting costs a wake-up per call (gloo loses 10-100x
 * in latency that way).  It first waits for the group's earlier
 * asynchronous calls, so that every rank issues the group's collectives in
 * the same order.  Asynchronous calls go to one progress thread that runs
 * them in the order they were made; while asynchronous point-to-point
 * requests are out, the same thread keeps the transport moving, so a rank
 * busy with other work never holds its peers back.
 *
 * Sequence numbers are taken on the calling thread at submission, in call
 * order, which is what the receiving side checks against.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dri.h"

#define MSG_MAX 1024

struct gpriv {
	int pending; /* asynchronous calls queued or running */
};

struct dr_work {
	struct dr_work *next; /* queue, or list of outstanding p2p */
	dri_op op;
	int is_p2p;
	int done;
	int in_list;
	dr_err status;
	char msg[MSG_MAX];
	dri_req req;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;       /* work finished, queue changed */
	int on;
	int rank, size;
	dr_group world;
	struct gpriv world_priv;
	pthread_t thread;
	int thread_on, stop;
	dr_work *qhead, *qtail;  /* collectives, in order */
	dr_work *p2p;            /* outstanding point-to-point */
} G = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cv = PTHREAD_COND_INITIALIZER,
};

static _Thread_local int64_t cur_timeout_ms;
static _Thread_local void *scratch;
static _Thread_local size_t scratch_len;

void *dri_scratch_keep(size_t n)
{
	if (n && n <= scratch_len)
		return scratch;
	free(scratch);
	scratch = malloc(n ? n : 1);
	scratch_len = scratch ? n : 0;
	if (!scratch)
		dri_fail(DR_ENOMEM, "out of memory for %zu bytes of scratch", n);
	return scratch;
}

void dri_scratch_release(void)
{
	free(scratch);
	scratch = NULL;
	scratch_len = 0;
}

int64_t dri_op_timeout_ms(void)
{
	return cur_timeout_ms > 0 ? cur_timeout_ms : dri_timeout_ms();
}

dr_group *dri_world(void)
{
	return G.on ? &G.world : NULL;
}

void dri_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}

static void timed_wait(int64_t ms)
{
	dri_cond_wait_ms(&G.cv, &G.mu, ms);
}

/* ------------------------------------------------------------ groups */

dr_err dri_groups_init(int rank, int world_size)
{
	pthread_mutex_lock(&G.mu);
	memset(&G.world, 0, sizeof(G.world));
	memset(&G.world_priv, 0, sizeof(G.world_priv));
	G.world.id = 0;
	G.world.size = world_size;
	G.world.rank = rank;
	G.world.ranks = NULL; /* the identity */
	G.world.priv = &G.world_priv;
	G.rank = rank;
	G.size = world_size;
	G.stop = 0;
	G.on = 1;
	pthread_mutex_unlock(&G.mu);
	return DR_OK;
}

dr_group *dri_group_create(uint32_t id, const int *ranks, int n)
{
	dr_group *g = calloc(1, sizeof(*g));

	if (g) {
		g->ranks = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
		g->priv = calloc(1, sizeof(struct gpriv));
	}
	if (!g || !g->ranks || !g->priv) {
		if (g) {
			free(g->ranks);
			free(g->priv);
		}
		free(g);
		dri_fail(DR_ENOMEM, "out of memory for a group of %d ranks", n);
		return NULL;
	}
	g->id = id;
	g->size = n;
	g->rank = -1;
	for (int i = 0; i < n; i++) {
		g->ranks[i] = ranks[i];
		if (ranks[i] == G.rank)
			g->rank = i;
	}
	return g;
}

/* Waits until the group has no queued asynchronous call; the timeout of
 * those calls bounds this wait. */
static void wait_group_idle_locked(dr_group *g)
{
	struct gpriv *gp = g->priv;

	while (gp && gp->pending)
		timed_wait(1000);
}

void dri_group_free(dr_group *g)
{
	if (!g || g == &G.world)
		return;
	pthread_mutex_lock(&G.mu);
	wait_group_idle_locked(g);
	pthread_mutex_unlock(&G.mu);
	free(g->ranks);
	free(g->priv);
	free(g);
}

/* ------------------------------------------------------------ running */

static dr_err run_op(dri_op *op)
{
	int64_t saved = cur_timeout_ms;
	dr_err err;

	cur_timeout_ms = op->timeout_ms > 0 ? op->timeout_ms : dri_timeout_ms();
	err = dri_transport_check();
	if (!err)
		err = op->device >= 0 ? dri_cuda_run_staged(op) : op->run(op);
	cur_timeout_ms = saved;
	free(op->counts);
	free(op->device_ids);
	op->counts = NULL;
	op->device_ids = NULL;
	return err;
}

/* Outstanding p2p works whose request has completed are marked done. */
static int p2p_reap_locked(void)
{
	dr_work **pp = &G.p2p;
	int left = 0;

	while (*pp) {
		dr_work *w = *pp;
		if (__atomic_load_n(&w->req.complete, __ATOMIC_ACQUIRE)) {
			*pp = w->next;
			w->next = NULL;
			w->in_list = 0;
			if (!w->done) {
				w->status = w->req.status;
				w->done = 1;
			}
			continue;
		}
		left++;
		pp = &w->next;
	}
	return left;
}

static void *progress_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&G.mu);
	for (;;) {
		if (G.qhead) {
			dr_work *w = G.qhead;
			G.qhead = w->next;
			if (!G.qhead)
				G.qtail = NULL;
			pthread_mutex_unlock(&G.mu);
			dr_err err = run_op(&w->op);
			pthread_mutex_lock(&G.mu);
			w->status = err;
			if (err)
				snprintf(w->msg, sizeof(w->msg), "%s", dr_last_error());
			w->done = 1;
			((struct gpriv *)w->op.group->priv)->pending--;
			pthread_cond_broadcast(&G.cv);
			continue;
		}
		if (p2p_reap_locked()) {
			pthread_mutex_unlock(&G.mu);
			dri_transport_progress(100);
			pthread_mutex_lock(&G.mu);
			pthread_cond_broadcast(&G.cv);
			continue;
		}
		if (G.stop)
			break;
		timed_wait(1000);
	}
	pthread_mutex_unlock(&G.mu);
	dri_scratch_release();
	return NULL;
}

static dr_err start_thread_locked(void)
{
	if (G.thread_on)
		return DR_OK;
	if (pthread_create(&G.thread, NULL, progress_main, NULL))
		return dri_fail(DR_ESYS, "cannot start the progress thread");
	G.thread_on = 1;
	return DR_OK;
}

dr_err dri_submit(const dri_op *in, dr_work **work)
{
	dri_op op = *in;
	dr_group *g = op.group ? op.group : dri_world();
	dr_err err;

	if (work)
		*work = NULL;
	if (!g) {
		err = dri_fail(DR_ENOINIT, "%s: the default process group has "
			       "not been initialized",
			       dri_coll_name((dri_coll)op.id.coll));
		goto fail;
	}
	if (g->rank < 0) {
		err = dri_fail(DR_ENOTMEMBER, "%s: rank %d is not a member of "
			       "the group", dri_coll_name((dri_coll)op.id.coll),
			       G.rank);
		goto fail;
	}
	err = dri_transport_check();
	if (err)
		goto fail;
	op.group = g;
	pthread_mutex_lock(&G.mu);
	op.id.group_id = g->id;
	op.id.seq = g->seq++;
	if (!work) {
		wait_group_idle_locked(g);
		pthread_mutex_unlock(&G.mu);
		return run_op(&op);
	}
	dr_work *w = calloc(1, sizeof(*w));
	if (!w) {
		pthread_mutex_unlock(&G.mu);
		err = dri_fail(DR_ENOMEM, "out of memory");
		goto fail;
	}
	err = start_thread_locked();
	if (err) {
		pthread_mutex_unlock(&G.mu);
		free(w);
		goto fail;
	}
	w->op = op;
	((struct gpriv *)g->priv)->pending++;
	if (G.qtail)
		G.qtail->next = w;
	else
		G.qhead = w;
	G.qtail = w;
	pthread_cond_broadcast(&G.cv);
	pthread_mutex_unlock(&G.mu);
	*work = w;
	return DR_OK;
fail:
	free(op.counts);
	free(op.device_ids);
	return err;
}

void dri_groups_shutdown(void)
{
	int64_t deadline = dri_now_ms() + dri_timeout_ms();

	pthread_mutex_lock(&G.mu);
	while ((G.qhead || G.world_priv.pending) && dri_now_ms() < deadline)
		timed_wait(100);
	G.stop = 1;
	pthread_cond_broadcast(&G.cv);
	pthread_mutex_unlock(&G.mu);
	dri_transport_wake();
	if (G.thread_on)
		pthread_join(G.thread, NULL);
	pthread_mutex_lock(&G.mu);
	G.thread_on = 0;
	G.on = 0;
	G.p2p = NULL;
	pthread_mutex_unlock(&G.mu);
}

/* ---------------------------------------------------------- p2p works */

dr_work *dri_work_p2p_new(void)
{
	dr_work *w = calloc(1, sizeof(*w));

	if (!w) {
		dri_fail(DR_ENOMEM, "out of memory");
		return NULL;
	}
	w->is_p2p = 1;
	return w;
}

dri_req *dri_work_req(dr_work *w)
{
	return &w->req;
}

void dri_work_p2p_start(dr_work *w)
{
	pthread_mutex_lock(&G.mu);
	if (start_thread_locked() == DR_OK) {
		w->next = G.p2p;
		G.p2p = w;
		w->in_list = 1;
	}
	pthread_cond_broadcast(&G.cv);
	pthread_mutex_unlock(&G.mu);
}

/* ------------------------------------------------------- work handles */

static dr_err work_result(dr_work *w)
{
	if (w->status)
		dri_set_last_error(w->msg[0] ? w->msg : dr_strerror(w->status));
	return w->status;
}

dr_err dr_work_wait_timeout(dr_work *w, int64_t timeout_ms)
{
	int64_t deadline;

	if (!w)
		return dri_fail(DR_EINVAL, "dr_work_wait: work is NULL");
	deadline = dri_now_ms() + (timeout_ms > 0 ? timeout_ms : dri_timeout_ms());
	pthread_mutex_lock(&G.mu);
	for (;;) {
		if (w->is_p2p && !w->done &&
		    __atomic_load_n(&w->req.complete, __ATOMIC_ACQUIRE)) {
			w->status = w->req.status;
			if (w->status)
				snprintf(w->msg, sizeof(w->msg), "%s",
					 dri_transport_check() ? dr_last_error()
							       : dr_strerror(w->status));
			w->done = 1;
		}
		if (w->done)
			break;
		int64_t left = deadline - dri_now_ms();
		if (left <= 0) {
			pthread_mutex_unlock(&G.mu);
			return dri_fail(DR_ETIMEDOUT, "dr_work_wait: %s not "
					"complete after %lld ms",
					w->is_p2p ? (w->req.is_send ? "isend" : "irecv")
						  : dri_coll_name((dri_coll)w->op.id.coll),
					(long long)(timeout_ms > 0 ? timeout_ms
							: dri_timeout_ms()));
		}
		if (w->is_p2p) {
			/* Drive the transport ourselves rather than wait for
			 * the progress thread to notice. */
			pthread_mutex_unlock(&G.mu);
			dri_transport_progress(left > 100 ? 100 : left);
			pthread_mutex_lock(&G.mu);
			continue;
		}
		timed_wait(left > 1000 ? 1000 : left);
	}
	pthread_mutex_unlock(&G.mu);
	return work_result(w);
}

dr_err dr_work_wait(dr_work *w)
{
	if (!w)
		return dri_fail(DR_EINVAL, "dr_work_wait: work is NULL");
	if (w->is_p2p) {
		/* The transport's own timeout bounds this; it aborts the
		 * group on expiry like any other wait. */
		pthread_mutex_lock(&G.mu);
		int done = w->done;
		pthread_mutex_unlock(&G.mu);
		if (!done) {
			dr_err err = dri_waitall(&w->req, 1);
			pthread_mutex_lock(&G.mu);
			if (!w->done) {
				w->status = err;
				if (err)
					snprintf(w->msg, sizeof(w->msg), "%s",
						 dr_last_error());
				w->done = 1;
			}
			pthread_mutex_unlock(&G.mu);
		}
		return work_result(w);
	}
	return dr_work_wait_timeout(w, 0);
}

int dr_work_is_completed(dr_work *w)
{
	int done;

	if (!w)
		return 0;
	pthread_mutex_lock(&G.mu);
	done = w->done || (w->is_p2p &&
			   __atomic_load_n(&w->req.complete, __ATOMIC_ACQUIRE));
	pthread_mutex_unlock(&G.mu);
	return done;
}

dr_err dr_work_status(dr_work *w)
{
	dr_err st = DR_OK;

	if (!w)
		return DR_EINVAL;
	pthread_mutex_lock(&G.mu);
	if (w->done)
		st = w->status;
	else if (w->is_p2p && __atomic_load_n(&w->req.complete, __ATOMIC_ACQUIRE))
		st = w->req.status;
	pthread_mutex_unlock(&G.mu);
	return st;
}

int dr_work_source(dr_work *w)
{
	if (!w || !w->is_p2p || w->req.is_send || !dr_work_is_completed(w))
		return -1;
	return w->req.source;
}

void dr_work_free(dr_work *w)
{
	if (!w)
		return;
	if (!dr_work_is_completed(w))
		(void)dr_work_wait(w);
	pthread_mutex_lock(&G.mu);
	if (w->in_list) {
		for (dr_work **pp = &G.p2p; *pp; pp = &(*pp)->next)
			if (*pp == w) {
				*pp = w->next;
				break;
			}
	}
	pthread_mutex_unlock(&G.mu);
	free(w);
}
