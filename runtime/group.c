/*
 * group.c - process groups, the order of calls on them, the progress
 * threads and dr_work handles.
 *
 * A blocking call runs its algorithm on the caller's thread: handing it to
 * another thread and waiting costs a wake-up per call (gloo loses 10-100x
 * in latency that way).  It first waits for the group's earlier
 * asynchronous calls, so that every rank issues the group's collectives in
 * the same order.  Asynchronous calls go to the group's own progress
 * thread (started on the group's first one), which runs them in the order
 * they were made.  One queue per group, as torch gives each group its own:
 * with a single queue for all groups, two ranks issuing asynchronous calls
 * on groups A and B in different orders would each run first the call the
 * other runs second, and both wait until the timeout.
 *
 * Point-to-point requests do not queue; while asynchronous ones are out, a
 * thread of their own keeps the transport moving, so a rank busy with
 * other work never holds its peers back.
 *
 * Every group made by dri_group_create is on a list, so that
 * dr_destroy_process_group can stop its thread and free its member list
 * even when the program never calls dr_group_destroy.  The handle itself
 * (a small shell: rank -1, size 0) stays on the list until
 * dr_group_destroy frees it, so that a program may still pass it there
 * after the process group is gone: no double free, no use after free.
 *
 * Sequence numbers are taken on the calling thread at submission, in call
 * order, which is what the receiving side checks against.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ctl.h"
#include "error.h"
#include "group.h"
#include "timeout.h"

#define MSG_MAX 1024

/* A group's asynchronous queue and the thread that runs it. */
struct gpriv {
	int pending;            /* asynchronous calls queued or running */
	dr_work *qhead, *qtail; /* queued, in call order */
	pthread_t thread;
	int thread_on, stop;
};

/* A group made by dri_group_create, on the list of every such group. */
struct gnode {
	struct gnode *next;
	dr_group *g;
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
	struct gnode *groups;    /* every dri_group_create'd group, dead or not */
	pthread_t p2p_thread;    /* drives outstanding point-to-point */
	int p2p_on, stop;
	dr_work *p2p;            /* outstanding point-to-point */
} sched = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cv = PTHREAD_COND_INITIALIZER,
};

dr_group *dri_world(void)
{
	return sched.on ? &sched.world : NULL;
}

int dri_world_take_seq(int (*ok)(void *), void *arg, uint64_t *seq)
{
	uint64_t s = __atomic_load_n(&sched.world.seq, __ATOMIC_ACQUIRE);

	/* Without the lock: a compare-and-swap on the number.  dri_submit
	 * counts a queued call in pending before it takes its number (with
	 * release), so a number read here that is still the world's when
	 * the swap succeeds had no call queued after it; pending read as 0
	 * after it (acquire) means none queued before it is left either,
	 * and what the progress thread's last call wrote is visible to ok.
	 * A lost race answers 0: the call goes through dri_submit. */
	if (!__atomic_load_n(&sched.on, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&sched.world_priv.pending, __ATOMIC_ACQUIRE) ||
	    !ok(arg))
		return 0;
	if (!__atomic_compare_exchange_n(&sched.world.seq, &s, s + 1, 0,
					 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 0;
	*seq = s;
	return 1;
}

int dri_world_rank(void)
{
	return sched.on ? sched.world.rank : -1;
}

int dri_world_size(void)
{
	return sched.on ? sched.world.size : -1;
}

void *dri_or_empty(const void *p)
{
	static char empty[8];
	return p ? (void *)p : empty;
}


static void timed_wait(int64_t ms)
{
	dri_cond_wait_ms(&sched.cv, &sched.mu, ms);
}

/* ------------------------------------------------------------ groups */

dr_err dri_groups_init(int rank, int world_size)
{
	pthread_mutex_lock(&sched.mu);
	memset(&sched.world, 0, sizeof(sched.world));
	memset(&sched.world_priv, 0, sizeof(sched.world_priv));
	sched.world.id = 0;
	sched.world.size = world_size;
	sched.world.rank = rank;
	sched.world.ranks = NULL; /* the identity */
	sched.world.priv = &sched.world_priv;
	sched.rank = rank;
	sched.size = world_size;
	sched.stop = 0;
	__atomic_store_n(&sched.on, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&sched.mu);
	return DR_OK;
}

dr_group *dri_group_create(uint32_t id, const int *ranks, int n)
{
	dr_group *g = calloc(1, sizeof(*g));
	struct gnode *node = calloc(1, sizeof(*node));

	if (g) {
		g->ranks = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
		g->priv = calloc(1, sizeof(struct gpriv));
	}
	if (!g || !node || !g->ranks || !g->priv) {
		if (g) {
			free(g->ranks);
			free(g->priv);
		}
		free(g);
		free(node);
		dri_fail(DR_ENOMEM, "out of memory for a group of %d ranks", n);
		return NULL;
	}
	g->id = id;
	g->size = n;
	g->rank = -1;
	for (int i = 0; i < n; i++) {
		g->ranks[i] = ranks[i];
		if (ranks[i] == sched.rank)
			g->rank = i;
	}
	node->g = g;
	pthread_mutex_lock(&sched.mu);
	node->next = sched.groups;
	sched.groups = node;
	pthread_mutex_unlock(&sched.mu);
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

/* Lets the group's progress thread finish its queue and joins it.  Called
 * with sched.mu held; drops it while joining. */
static void stop_group_thread_locked(struct gpriv *gp)
{
	if (!gp->thread_on)
		return;
	gp->stop = 1;
	pthread_cond_broadcast(&sched.cv);
	pthread_mutex_unlock(&sched.mu);
	pthread_join(gp->thread, NULL);
	pthread_mutex_lock(&sched.mu);
	gp->thread_on = 0;
}

/* Frees what a group holds beyond its handle and leaves the handle as a
 * shell that no call accepts: no members, no queue.  sched.mu held. */
static void group_release_locked(dr_group *g)
{
	struct gpriv *gp = g->priv;

	if (!gp)
		return;
	wait_group_idle_locked(g);
	stop_group_thread_locked(gp);
	free(g->ranks);
	free(gp);
	g->ranks = NULL;
	g->priv = NULL;
	g->rank = -1;
	g->size = 0;
}

void dri_group_free(dr_group *g)
{
	struct gnode **pp, *node = NULL;

	if (!g || g == &sched.world)
		return;
	pthread_mutex_lock(&sched.mu);
	for (pp = &sched.groups; *pp; pp = &(*pp)->next)
		if ((*pp)->g == g) {
			node = *pp;
			*pp = node->next;
			break;
		}
	/* Not ours (or destroyed twice): leave it alone. */
	if (node)
		group_release_locked(g);
	pthread_mutex_unlock(&sched.mu);
	if (node) {
		free(node);
		free(g);
	}
}

/* ------------------------------------------------------------ running */

void dri_abandon(dr_err err)
{
	char why[MSG_MAX], msg[MSG_MAX + 32];

	snprintf(why, sizeof(why), "%s", dr_last_error());
	if (dri_transport_check()) {
		/* already aborted (a failed wait): the transport's message */
		dri_set_last_error(why);
		return;
	}
	snprintf(msg, sizeof(msg), "rank %d: %s", sched.rank, why);
	dri_transport_abort(err, msg);
	dri_set_last_error(msg);
}

dr_err dri_run_op(dri_op *op)
{
	dr_err err;

	/* The call's deadline, from now: every wait of the call ends there. */
	op->id.timeout_ms = op->timeout_ms > 0 ? op->timeout_ms : dri_timeout_ms();
	op->id.deadline = dri_deadline(op->id.timeout_ms);
	err = dri_transport_check();
	if (!err) {
		dri_ctl_begin(&op->id, -1, 0);
		err = dri_call_end(op->id.coll, op->run(op));
	}
	if (op->release)
		op->release(op);
	free(op->counts);
	op->counts = NULL;
	return err;
}

dr_err dri_call_end(dri_coll coll, dr_err err)
{
	dri_ctl_end(err);
	if (err && coll != DRI_MONITORED_BARRIER)
		dri_abandon(err);
	return err;
}

/* Records a finished request's status in its p2p work, with a message
 * for dr_work_wait to hand on. */
static void p2p_finish_locked(dr_work *w, dr_err err, const char *msg)
{
	if (w->done)
		return;
	w->status = err;
	if (err)
		snprintf(w->msg, sizeof(w->msg), "%s", msg && *msg ? msg
			 : dr_strerror(err));
	w->done = 1;
}

/* The message of a request that failed in the transport: the transport's
 * own when it was aborted, else the code's. */
static const char *req_failure(const dri_req *r)
{
	if (!sched.on || (sched.stop && r->status == DR_EABORTED))
		return "the process group was destroyed before the request "
		       "completed";
	return dri_transport_check() ? dr_last_error() : dr_strerror(r->status);
}

/* Outstanding p2p works whose request has completed are marked done. */
static int p2p_reap_locked(void)
{
	dr_work **pp = &sched.p2p;
	int left = 0;

	while (*pp) {
		dr_work *w = *pp;
		if (__atomic_load_n(&w->req.complete, __ATOMIC_ACQUIRE)) {
			*pp = w->next;
			w->next = NULL;
			w->in_list = 0;
			p2p_finish_locked(w, w->req.status,
					  w->req.status ? req_failure(&w->req)
							: NULL);
			continue;
		}
		left++;
		pp = &w->next;
	}
	return left;
}

/* The progress thread of one group: runs its asynchronous calls in
 * order until told to stop with an empty queue. */
static void *group_main(void *arg)
{
	struct gpriv *gp = arg;

	pthread_mutex_lock(&sched.mu);
	for (;;) {
		if (gp->qhead) {
			dr_work *w = gp->qhead;
			gp->qhead = w->next;
			if (!gp->qhead)
				gp->qtail = NULL;
			pthread_mutex_unlock(&sched.mu);
			dr_err err = dri_run_op(&w->op);
			pthread_mutex_lock(&sched.mu);
			w->status = err;
			if (err)
				snprintf(w->msg, sizeof(w->msg), "%s", dr_last_error());
			w->done = 1;
			/* (release: dri_world_take_seq reads it unlocked) */
			__atomic_fetch_sub(&gp->pending, 1, __ATOMIC_RELEASE);
			pthread_cond_broadcast(&sched.cv);
			continue;
		}
		if (gp->stop)
			break;
		timed_wait(1000);
	}
	pthread_mutex_unlock(&sched.mu);
	return NULL;
}

/* Drives the transport while asynchronous point-to-point requests are
 * out. */
/* Destroy has begun: a point-to-point receive still out fails with
 * DR_EABORTED now (nothing the program waits for is left); sends still
 * out stay queued for the transport's stop, which lets them drain for a
 * while and fails what is left with DR_EABORTED (transport.c). */
static void p2p_abandon_recvs_locked(void)
{
	for (dr_work *w = sched.p2p; w; w = w->next)
		if (!w->req.is_send &&
		    !__atomic_load_n(&w->req.complete, __ATOMIC_ACQUIRE))
			dri_req_abandon(&w->req, DR_EABORTED);
}

static void *p2p_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&sched.mu);
	for (;;) {
		if (sched.stop) {
			p2p_abandon_recvs_locked();
			p2p_reap_locked();
			break;
		}
		if (p2p_reap_locked()) {
			pthread_mutex_unlock(&sched.mu);
			dri_transport_progress(100);
			pthread_mutex_lock(&sched.mu);
			pthread_cond_broadcast(&sched.cv);
			continue;
		}
		if (sched.stop)
			break;
		timed_wait(1000);
	}
	pthread_mutex_unlock(&sched.mu);
	return NULL;
}

static dr_err start_group_thread_locked(struct gpriv *gp)
{
	if (gp->thread_on)
		return DR_OK;
	gp->stop = 0;
	if (dri_thread_start(&gp->thread, NULL, group_main, gp))
		return dri_fail(DR_ESYS, "cannot start a progress thread");
	gp->thread_on = 1;
	return DR_OK;
}

static dr_err start_p2p_thread_locked(void)
{
	if (sched.p2p_on)
		return DR_OK;
	if (dri_thread_start(&sched.p2p_thread, NULL, p2p_main, NULL))
		return dri_fail(DR_ESYS, "cannot start the progress thread");
	sched.p2p_on = 1;
	return DR_OK;
}

dr_err dri_submit(const dri_op *in, dr_work **work)
{
	dri_op op = *in;
	dr_group *g = op.group ? op.group : dri_world();
	const char *call = dri_coll_name((dri_coll)op.id.coll);
	struct gpriv *gp;
	dr_work *w = NULL;
	dr_err err;

	if (work)
		*work = NULL;
	if (!g) {
		err = dri_fail(DR_ENOINIT, "%s: the default process group has "
			       "not been initialized", call);
		goto fail;
	}
	if (!g->priv) {
		err = dri_fail(DR_EINVAL, "%s: the group was destroyed with "
			       "the process group", call);
		goto fail;
	}
	if (g->rank < 0) {
		err = dri_fail(DR_ENOTMEMBER, "%s: rank %d is not a member of "
			       "the group", call, sched.rank);
		goto fail;
	}
	if (op.start) {
		err = op.start(&op, work != NULL);
		if (err)
			goto fail;
	}
	err = dri_transport_check();
	if (err)
		goto fail;
	if (work) {
		w = calloc(1, sizeof(*w));
		if (!w) {
			err = dri_fail(DR_ENOMEM, "%s: out of memory", call);
			goto fail;
		}
	}
	op.group = g;
	gp = g->priv;
	pthread_mutex_lock(&sched.mu);
	if (w) {
		err = start_group_thread_locked(gp);
		if (err) {
			pthread_mutex_unlock(&sched.mu);
			goto fail;
		}
	}
	op.id.group_id = g->id;
	/* A queued call is counted before it takes its number: the order
	 * dri_world_take_seq relies on. */
	if (w)
		__atomic_fetch_add(&gp->pending, 1, __ATOMIC_RELAXED);
	op.id.seq = __atomic_fetch_add(&g->seq, 1, __ATOMIC_RELEASE);
	if (!w) {
		wait_group_idle_locked(g);
		pthread_mutex_unlock(&sched.mu);
		return dri_run_op(&op);
	}
	w->op = op;
	if (gp->qtail)
		gp->qtail->next = w;
	else
		gp->qhead = w;
	gp->qtail = w;
	pthread_cond_broadcast(&sched.cv);
	pthread_mutex_unlock(&sched.mu);
	*work = w;
	return DR_OK;
fail:
	if (op.release)
		op.release(&op);
	free(w);
	free(op.counts);
	return err;
}

void dri_groups_shutdown(void)
{
	int64_t deadline = dri_now_ms() + dri_timeout_ms();

	pthread_mutex_lock(&sched.mu);
	/* Queued calls first, each bounded by its own timeout; then every
	 * group's thread, then the point-to-point one. */
	for (;;) {
		int busy = sched.world_priv.pending;
		for (struct gnode *n = sched.groups; n; n = n->next)
			if (n->g->priv)
				busy += ((struct gpriv *)n->g->priv)->pending;
		if (!busy || dri_now_ms() >= deadline)
			break;
		timed_wait(100);
	}
	for (struct gnode *n = sched.groups; n; n = n->next)
		group_release_locked(n->g);
	stop_group_thread_locked(&sched.world_priv);
	sched.stop = 1;
	pthread_cond_broadcast(&sched.cv);
	pthread_mutex_unlock(&sched.mu);
	dri_transport_wake();
	if (sched.p2p_on)
		pthread_join(sched.p2p_thread, NULL);
	pthread_mutex_lock(&sched.mu);
	sched.p2p_on = 0;
	__atomic_store_n(&sched.on, 0, __ATOMIC_RELEASE);
	/* Works still out keep their handles; they are no longer listed. */
	while (sched.p2p) {
		dr_work *w = sched.p2p;
		sched.p2p = w->next;
		w->next = NULL;
		w->in_list = 0;
	}
	pthread_mutex_unlock(&sched.mu);
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
	pthread_mutex_lock(&sched.mu);
	/* Without the thread the request still moves whenever the caller
	 * waits on it (dr_work_wait drives the transport). */
	if (start_p2p_thread_locked() == DR_OK) {
		w->next = sched.p2p;
		sched.p2p = w;
		w->in_list = 1;
	}
	pthread_cond_broadcast(&sched.cv);
	pthread_mutex_unlock(&sched.mu);
}

/* ------------------------------------------------------- work handles */

static dr_err work_result(dr_work *w)
{
	if (w->status)
		dri_set_last_error(w->msg[0] ? w->msg : dr_strerror(w->status));
	return w->status;
}

static const char *work_name(const dr_work *w)
{
	if (w->is_p2p)
		return w->req.is_send ? "isend" : "irecv";
	return dri_coll_name((dri_coll)w->op.id.coll);
}

dr_err dr_work_wait_timeout(dr_work *w, int64_t timeout_ms)
{
	int64_t limit = timeout_ms > 0 ? timeout_ms : dri_timeout_ms();
	int64_t deadline;

	if (!w)
		return dri_fail(DR_EINVAL, "dr_work_wait: work is NULL");
	deadline = dri_now_ms() + limit;
	pthread_mutex_lock(&sched.mu);
	for (;;) {
		if (w->is_p2p && !w->done &&
		    __atomic_load_n(&w->req.complete, __ATOMIC_ACQUIRE))
			p2p_finish_locked(w, w->req.status,
					  w->req.status ? req_failure(&w->req)
							: NULL);
		if (w->done)
			break;
		int64_t left = deadline - dri_now_ms();
		if (left <= 0) {
			pthread_mutex_unlock(&sched.mu);
			return dri_fail(DR_ETIMEDOUT, "dr_work_wait: %s not "
					"complete after %lld ms", work_name(w),
					(long long)limit);
		}
		if (w->is_p2p) {
			/* Drive the transport ourselves rather than wait for
			 * the progress thread to notice. */
			pthread_mutex_unlock(&sched.mu);
			dri_transport_progress(left > 100 ? 100 : left);
			pthread_mutex_lock(&sched.mu);
			continue;
		}
		timed_wait(left > 1000 ? 1000 : left);
	}
	pthread_mutex_unlock(&sched.mu);
	return work_result(w);
}

dr_err dr_work_wait(dr_work *w)
{
	if (!w)
		return dri_fail(DR_EINVAL, "dr_work_wait: work is NULL");
	if (w->is_p2p) {
		/* The transport's own timeout bounds this; it aborts the
		 * group on expiry like any other wait. */
		pthread_mutex_lock(&sched.mu);
		int done = w->done;
		pthread_mutex_unlock(&sched.mu);
		if (!done) {
			dr_err err = dri_waitall(&w->req, 1);
			pthread_mutex_lock(&sched.mu);
			p2p_finish_locked(w, err, err ? dr_last_error() : NULL);
			pthread_mutex_unlock(&sched.mu);
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
	pthread_mutex_lock(&sched.mu);
	done = w->done || (w->is_p2p &&
			   __atomic_load_n(&w->req.complete, __ATOMIC_ACQUIRE));
	pthread_mutex_unlock(&sched.mu);
	return done;
}

dr_err dr_work_status(dr_work *w)
{
	dr_err st = DR_OK;

	if (!w)
		return DR_EINVAL;
	pthread_mutex_lock(&sched.mu);
	if (w->done)
		st = w->status;
	else if (w->is_p2p && __atomic_load_n(&w->req.complete, __ATOMIC_ACQUIRE))
		st = w->req.status;
	pthread_mutex_unlock(&sched.mu);
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
	pthread_mutex_lock(&sched.mu);
	/* dr_work_wait gives up after the job's timeout, counted from now;
	 * an op queued behind others may run longer (each bounded by its own
	 * timeout), and its thread writes into w when it ends. */
	while (!w->is_p2p && !w->done)
		timed_wait(1000);
	if (w->in_list) {
		for (dr_work **pp = &sched.p2p; *pp; pp = &(*pp)->next)
			if (*pp == w) {
				*pp = w->next;
				break;
			}
	}
	pthread_mutex_unlock(&sched.mu);
	free(w);
}
