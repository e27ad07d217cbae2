/*
 * init.c - joining and leaving the job: dr_init_process_group, the
 * rendezvous through the store, rank and world size, timeouts,
 * dr_destroy_process_group.
 *
 * Where the store is and who serves it (MASTER_*, tcp://, file://, other
 * launchers' variables, torchrun's agent) is rdzv_env.c's to find out;
 * the exchange below is the same whoever serves it.
 *
 * Rendezvous: every rank derives the store key from the job's secret and
 * what every rank knows before it connects (the port, the run id, the
 * world size; auth.h).  Rank 0 serves the store (on MASTER_ADDR's
 * addresses only); every rank connects to it and proves the key (retrying
 * until the timeout, as the server may start later); rank 0 publishes a
 * random job nonce and the world size, from which every rank derives the
 * transport key; every rank publishes the address it listens on, rank 0
 * gathers them into one key that the others fetch.  A barrier over the
 * transport ends init, so no rank leaves init (and possibly the store)
 * before every rank has what it needs.
 *
 * A program may destroy the group and init again, and its ranks need not
 * do so in step: a rank may init again while rank 0 is still in the last
 * group, whose store still serves.  So every key of the n-th init of a
 * process (n counted from 0, the same on every rank) is prefixed
 * "roundN/" (none for the first, as before), and a rank other than 0
 * whose store connection drops during the rendezvous (rank 0 destroyed
 * the old group and stopped its store) starts its rendezvous again,
 * connecting to rank 0's new store, until the timeout.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "coll.h"
#include "coll_shm.h"
#include "ctl.h"
#include "cuda_driver.h"
#include "error.h"
#include "group.h"
#include "rdzv.h"
#include "seg.h"
#include "shm.h"
#include "store.h"
#include "timeout.h"
#include "transport.h"

static struct {
	int on;
	int rank, size;
	dri_store_server *srv;
	dri_kv kv;
	dri_rdzv_plan plan;
	int atexit_set;
	pid_t pid; /* the process that joined */
	unsigned round; /* process groups this process has joined */
	int store_up;   /* this rendezvous reached the store */
} pgroup = { .rank = -1, .size = -1 };

/* The store key of name in this init's round (see the top). */
static void round_key(char *buf, size_t size, const char *name)
{
	if (pgroup.round)
		snprintf(buf, size, "round%u/%s", pgroup.round, name);
	else
		snprintf(buf, size, "%s", name);
}



int dr_is_initialized(void)
{
	return pgroup.on;
}

int dr_get_rank(void)
{
	return pgroup.on ? pgroup.rank : -1;
}

int dr_get_world_size(void)
{
	return pgroup.on ? pgroup.size : -1;
}

dri_store *dri_world_store(void)
{
	return pgroup.on ? pgroup.kv.st : NULL;
}


/* This rank's address as the master sees it: the local end of the store
 * connection, which is on a route the other ranks can use too. */
/* DISTRUN_IFACE=NAME: the address of that interface (IPv4 first), for a
 * host whose route to rank 0 is not the interface the job should use. */
static dr_err iface_host(const char *name, char *buf, size_t size)
{
	struct ifaddrs *ifs, *a;
	char tmp[INET6_ADDRSTRLEN] = "";
	int found = 0;

	if (getifaddrs(&ifs))
		return dri_fail(DR_ESYS, "DISTRUN_IFACE=%s: getifaddrs: %s",
				name, dri_strerror(errno));
	for (int fam = AF_INET; fam && !*tmp; fam = fam == AF_INET ? AF_INET6 : 0)
		for (a = ifs; a && !*tmp; a = a->ifa_next) {
			if (strcmp(a->ifa_name, name))
				continue;
			found = 1;
			if (!a->ifa_addr || a->ifa_addr->sa_family != fam)
				continue;
			if (fam == AF_INET)
				inet_ntop(AF_INET, &((struct sockaddr_in *)
					  a->ifa_addr)->sin_addr, tmp, sizeof(tmp));
			else if (!IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)
					a->ifa_addr)->sin6_addr))
				inet_ntop(AF_INET6, &((struct sockaddr_in6 *)
					  a->ifa_addr)->sin6_addr, tmp, sizeof(tmp));
		}
	freeifaddrs(ifs);
	if (!*tmp)
		return dri_fail(DR_EENV, "DISTRUN_IFACE=%s: %s", name, found ?
				"the interface has no usable address" :
				"no such network interface");
	snprintf(buf, size, strchr(tmp, ':') ? "[%s]" : "%s", tmp);
	return DR_OK;
}

static dr_err local_host(int fd, char *buf, size_t size)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char tmp[INET6_ADDRSTRLEN];
	const char *iface = getenv("DISTRUN_IFACE");

	if (iface && *iface)
		return iface_host(iface, buf, size);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return dri_fail(DR_ESYS, "getsockname: %s", dri_strerror(errno));
	if (ss.ss_family == AF_INET) {
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, tmp,
			  sizeof(tmp));
		snprintf(buf, size, "%s", tmp);
	} else {
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
		if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
			inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], tmp,
				  sizeof(tmp));
			snprintf(buf, size, "%s", tmp);
		} else {
			inet_ntop(AF_INET6, &a6->sin6_addr, tmp, sizeof(tmp));
			snprintf(buf, size, "[%s]", tmp);
		}
	}
	return DR_OK;
}

/* Splits the gathered "addr\naddr\n..." into an array of n strings. */
static dr_err split_addrs(const char *all, int n, char ***out)
{
	char **a = calloc((size_t)n, sizeof(*a));
	const char *p = all;

	if (!a)
		return dri_fail(DR_ENOMEM, "out of memory");
	for (int i = 0; i < n; i++) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		a[i] = strndup(p, len);
		if (!a[i] || !len) {
			for (int k = 0; k <= i; k++)
				free(a[k]);
			free(a);
			return dri_fail(DR_EPROTO, "store: address list is short "
					"(%d of %d)", i, n);
		}
		p = nl ? nl + 1 : p + len;
	}
	*out = a;
	return DR_OK;
}

/* Line i of a dri_rdzv_settings text (without its newline) into out. */
static void same_var_line(const char *text, size_t i, char *out, size_t size)
{
	const char *p = text, *nl;

	for (; i && (nl = strchr(p, '\n')); i--)
		p = nl + 1;
	nl = strchr(p, '\n');
	snprintf(out, size, "%.*s", (int)(nl ? (size_t)(nl - p) : strlen(p)), p);
}

/* The value in a settings line "NAME=VALUE" (name nl bytes long) as a
 * message shows it: 'VALUE', or unset for a line "NAME". */
static void setting_value(const char *line, size_t nl, char *out, size_t size)
{
	if (strlen(line) > nl && line[nl] == '=')
		snprintf(out, size, "'%s'", line + nl + 1);
	else
		snprintf(out, size, "unset");
}

/* Rank 0 publishes its dri_rdzv_settings; the others compare theirs with
 * it and fail naming the first variable that differs. */
static dr_err same_vars_check(int64_t t)
{
	char mine[2048], theirs[2048], a[600], b[600], key[64];
	void *val = NULL;
	size_t len;
	dr_err err;

	if (dri_rdzv_settings(mine, sizeof(mine)))
		return dri_fail(DR_EENV, "%s and the other variables every rank "
				"must share: longer than %zu bytes in all",
				dri_rdzv_setting_vars[0], sizeof(mine) - 1);
	round_key(key, sizeof(key), "settings");
	if (pgroup.rank == 0)
		return dri_kv_set(&pgroup.kv, key, mine, strlen(mine));
	err = dri_kv_get(&pgroup.kv, key, &val, &len, t);
	if (err)
		return err;
	snprintf(theirs, sizeof(theirs), "%.*s",
		 (int)(len < sizeof(theirs) ? len : sizeof(theirs) - 1),
		 (const char *)val);
	free(val);
	for (size_t i = 0; i < DRI_RDZV_N_SETTINGS; i++) {
		size_t nl = strlen(dri_rdzv_setting_vars[i]);
		char va[620], vb[620];

		same_var_line(mine, i, a, sizeof(a));
		same_var_line(theirs, i, b, sizeof(b));
		if (!strcmp(a, b))
			continue;
		setting_value(a, nl, va, sizeof(va));
		setting_value(b, nl, vb, sizeof(vb));
		return dri_fail(DR_EENV, "%s is %s on rank %d but %s on rank 0: "
				"it must be the same on every rank",
				dri_rdzv_setting_vars[i], va, pgroup.rank, vb);
	}
	return DR_OK;
}

static dr_err rendezvous(int64_t t)
{
	char key[64], me[256], myhost[80], ident[4096], shm[160];
	uint8_t job[20], skey[DRI_KEY_LEN], tkey[DRI_KEY_LEN];
	void *val = NULL;
	size_t len;
	int lport;
	int64_t n;
	char **addrs = NULL;
	dr_err err = DR_OK;
	char name[48];

	/* Where the store is: rdzv_env.c's plan.  torchrun's agent serves
	 * its own; otherwise rank 0 serves ours, at a port published in a
	 * file when the plan says so (the others wait for the file). */
	dri_rdzv_identity(&pgroup.plan, ident, sizeof(ident));
	err = dri_auth_store_key(ident, skey);
	if (err)
		goto out;
	pgroup.kv.timeout_ms = t;
	if (pgroup.plan.mode == DRI_RDZV_TORCH) {
		/* torch's store has no authentication; the transport has */
		err = dri_tcpstore_connect(pgroup.plan.host, pgroup.plan.port,
					   pgroup.plan.prefix, t, &pgroup.kv.ts);
		if (err)
			goto out;
	} else {
		if (pgroup.rank == 0) {
			/* MASTER_ADDR's addresses, not every interface */
			err = dri_store_server_start(pgroup.plan.mode == DRI_RDZV_SERVE ?
						     pgroup.plan.host : pgroup.plan.bind,
						     pgroup.plan.port, skey, &pgroup.srv);
			if (!err && pgroup.plan.mode == DRI_RDZV_FILE)
				err = dri_rdzv_publish(&pgroup.plan,
					dri_store_server_port(pgroup.srv));
		} else if (pgroup.plan.mode == DRI_RDZV_FILE) {
			err = dri_rdzv_lookup(&pgroup.plan, t);
		}
		if (err)
			goto out;
		err = dri_store_connect(pgroup.plan.host, pgroup.plan.port, skey, pgroup.rank,
					t, &pgroup.kv.st);
		if (err)
			goto out;
	}
	pgroup.store_up = 1;
	/* Two processes with one RANK would corrupt everything after. */
	snprintf(name, sizeof(name), "rank/%d", pgroup.rank);
	round_key(key, sizeof(key), name);
	err = dri_kv_add(&pgroup.kv, key, 1, &n);
	if (err)
		goto out;
	if (n != 1) {
		err = dri_fail(DR_EENV, "RANK=%d is used by more than one "
			       "process of this job", pgroup.rank);
		goto out;
	}
	if (pgroup.rank == 0) {
		int32_t ws = pgroup.size;
		err = dri_random(job, 16);
		if (err)
			goto out;
		memcpy(job + 16, &ws, 4);
		round_key(key, sizeof(key), "job");
		err = dri_kv_set(&pgroup.kv, key, job, sizeof(job));
		if (err)
			goto out;
	} else {
		int32_t ws;
		round_key(key, sizeof(key), "job");
		err = dri_kv_get(&pgroup.kv, key, &val, &len, t);
		if (err)
			goto out;
		if (len != sizeof(job)) {
			free(val);
			err = dri_fail(DR_EPROTO, "store: bad job record");
			goto out;
		}
		memcpy(job, val, sizeof(job));
		free(val);
		memcpy(&ws, job + 16, 4);
		if (ws != pgroup.size) {
			err = dri_fail(DR_EENV, "WORLD_SIZE=%d on rank %d but "
				       "rank 0 has WORLD_SIZE=%d", pgroup.size,
				       pgroup.rank, (int)ws);
			goto out;
		}
	}
	err = same_vars_check(t);
	if (err)
		goto out;
	dri_auth_transport_key(skey, job, 16, tkey);
	err = local_host(dri_kv_fd(&pgroup.kv), myhost, sizeof(myhost));
	if (err)
		goto out;
	{
		/* Listen where the peers will be told to connect. */
		char bare[80];
		size_t hl = strlen(myhost);
		if (myhost[0] == '[')
			snprintf(bare, sizeof(bare), "%.*s", (int)(hl - 2),
				 myhost + 1);
		else
			snprintf(bare, sizeof(bare), "%s", myhost);
		err = dri_transport_listen(bare, pgroup.rank, pgroup.size, &lport);
	}
	if (err)
		goto out;
	/* The segment (under distrun) and what this rank says about shared
	 * memory with its address: peers on this host use it. */
	err = dri_seg_attach(pgroup.rank);
	if (!err && !dri_seg_get() && dri_shm_wanted())
		err = dri_seg_join(&pgroup.kv, pgroup.plan.local_rank, pgroup.plan.local_size,
				   job, t);
	if (!err)
		err = dri_shm_addr_suffix(shm, sizeof(shm));
	if (err)
		goto out;
	snprintf(me, sizeof(me), "%s:%d%s", myhost, lport, shm);
	snprintf(name, sizeof(name), "addr/%d", pgroup.rank);
	round_key(key, sizeof(key), name);
	err = dri_kv_set(&pgroup.kv, key, me, strlen(me));
	if (err)
		goto out;
	if (pgroup.rank == 0) {
		size_t cap = (size_t)pgroup.size * 64 + 1, used = 0;
		char *all = malloc(cap);
		if (!all) {
			err = dri_fail(DR_ENOMEM, "out of memory");
			goto out;
		}
		for (int r = 0; r < pgroup.size; r++) {
			snprintf(name, sizeof(name), "addr/%d", r);
			round_key(key, sizeof(key), name);
			err = dri_kv_get(&pgroup.kv, key, &val, &len, t);
			if (err) {
				free(all);
				err = dri_fail(err, "rank %d did not join within "
					       "%lld ms (%s)", r, (long long)t,
					       dr_last_error());
				goto out;
			}
			if (used + len + 2 > cap) {
				char *na = realloc(all, cap = 2 * cap + len);
				if (!na) {
					free(all);
					free(val);
					err = dri_fail(DR_ENOMEM, "out of memory");
					goto out;
				}
				all = na;
			}
			memcpy(all + used, val, len);
			used += len;
			all[used++] = '\n';
			free(val);
		}
		all[used] = 0;
		round_key(key, sizeof(key), "addrs");
		err = dri_kv_set(&pgroup.kv, key, all, used);
		if (!err)
			err = split_addrs(all, pgroup.size, &addrs);
		free(all);
	} else {
		round_key(key, sizeof(key), "addrs");
		err = dri_kv_get(&pgroup.kv, key, &val, &len, t);
		if (!err) {
			err = split_addrs(val, pgroup.size, &addrs);
			free(val);
		}
	}
	if (err)
		goto out;
	err = dri_transport_start(addrs, tkey);
	if (err) {
		for (int r = 0; r < pgroup.size; r++)
			free(addrs[r]);
		free(addrs);
	}
out:
	explicit_bzero(skey, sizeof(skey));
	explicit_bzero(tkey, sizeof(tkey));
	return err;
}

/* The rendezvous, again from the start while the store connection of a
 * rank other than 0 drops (rank 0 stopped the store of its last group:
 * see the top), until the timeout. */
static dr_err rendezvous_until_joined(void)
{
	int64_t t = dri_timeout_ms(), deadline = dri_now_ms() + t;
	dr_err err;

	for (;;) {
		pgroup.store_up = 0;
		err = rendezvous(t);
		t = deadline - dri_now_ms();
		if (!err || err != DR_ECONN || !pgroup.store_up || pgroup.rank == 0 ||
		    pgroup.plan.mode == DRI_RDZV_TORCH || t <= 0)
			return err;
		/* What this attempt opened goes; the segment stays. */
		dri_transport_stop();
		dri_kv_close(&pgroup.kv);
		nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	}
}

static void leave_at_exit(void)
{
	/* A program that returns from main without destroying the group
	 * still says goodbye, so its peers do not take it for a crash.  Not
	 * a forked child that exits: the connections are its parent's. */
	if (pgroup.on && getpid() == pgroup.pid)
		dr_destroy_process_group();
}

dr_err dr_init_process_group_opts(const dr_init_options *opts)
{
	dr_init_options dflt = DR_INIT_OPTIONS_INIT;
	const char *method, *backend;
	dr_err err;

	if (!opts)
		opts = &dflt;
	if (pgroup.on)
		return dri_fail(DR_EALREADY, "dr_init_process_group: the process "
				"group is already initialized (rank %d of %d)",
				pgroup.rank, pgroup.size);
	/* -1 (or a world_size of 0) takes the environment's; any other
	 * value below 0 is a mistake, not a request for the default. */
	if (opts->rank < -1 || opts->world_size < -1 ||
	    (opts->world_size > 0 && opts->rank >= opts->world_size))
		return dri_fail(DR_EINVAL, "dr_init_process_group: rank %d of "
				"world_size %d: each must be -1 (from the "
				"environment) or a rank below a size above 0",
				opts->rank, opts->world_size);
	backend = opts->backend;
	if (backend && strcmp(backend, "tcp") && strcmp(backend, "gloo"))
		return dri_fail(DR_EINVAL, "dr_init_process_group: backend '%s' "
				"is not supported (use \"tcp\")", backend);
	err = dri_timeout_init(opts->timeout_ms);
	if (err)
		return err;
	method = opts->init_method ? opts->init_method : "env://";
	err = dri_shm_configure(opts->transport);
	if (!err)
		err = dri_coll_configure();
	if (err)
		return err;
	err = dri_rdzv_plan_make(method, opts->rank, opts->world_size, &pgroup.plan);
	if (err)
		goto fail;
	pgroup.rank = pgroup.plan.rank;
	pgroup.size = pgroup.plan.size;
	err = rendezvous_until_joined();
	dri_rdzv_joined(&pgroup.plan);
	if (err)
		goto fail;
	/* After rendezvous, which maps the segment (dri_seg_attach). */
	dri_ctl_attach(pgroup.rank, pgroup.size);
	err = dri_groups_init(pgroup.rank, pgroup.size);
	if (err)
		goto fail;
	pgroup.on = 1;
	pgroup.round++;
	pgroup.pid = getpid();
	if (!pgroup.atexit_set && !atexit(leave_at_exit))
		pgroup.atexit_set = 1;
	/* (the first collective's reads, done here: not a cost of the
	 * program's first call) */
	dri_cuda_ptr_prepare();
	err = dr_barrier(NULL, NULL, NULL, 0);
	if (!err)
		dri_shm_coll_leave_init(pgroup.rank);
	if (err) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dr_last_error());
		dr_destroy_process_group();
		return dri_fail(err, "dr_init_process_group: %s", msg);
	}
	return DR_OK;
fail:
	{
		char msg[1024];
		const char *l = dr_get_launcher();
		snprintf(msg, sizeof(msg), "%s", dr_last_error());
		dri_transport_stop();
		dri_kv_close(&pgroup.kv);
		dri_store_server_stop(pgroup.srv);
		pgroup.srv = NULL;
		pgroup.rank = pgroup.size = -1;
		dri_timeout_clear();
		/* Under another launcher, say which one was read. */
		if (*l && strcmp(l, "torchrun or distrun") && !strstr(msg, l))
			return dri_fail(err, "%s [launcher: %s]", msg, l);
		return dri_fail(err, "%s", msg);
	}
}

dr_err dr_init_process_group(const char *backend, const char *init_method)
{
	dr_init_options o = DR_INIT_OPTIONS_INIT;

	o.backend = backend;
	o.init_method = init_method;
	return dr_init_process_group_opts(&o);
}

dr_err dr_destroy_process_group(void)
{
	if (!pgroup.on)
		return dri_fail(DR_ENOINIT, "dr_destroy_process_group: the "
				"process group has not been initialized");
	dri_groups_shutdown();
	dri_transport_stop();
	dri_scratch_drop();
	dri_ctl_detach();
	dri_kv_close(&pgroup.kv);
	dri_store_server_stop(pgroup.srv);
	pgroup.srv = NULL;
	pgroup.on = 0;
	pgroup.rank = pgroup.size = -1;
	dri_timeout_clear();
	return DR_OK;
}
