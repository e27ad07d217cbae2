/*
 * test_store.c - the rendezvous store on its own: set/get/add, a GET that
 * waits for a later SET, timeouts that name the key, a server that goes
 * away, a client with nothing to connect to.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dri.h"
#include "runner.h"

static dri_store_server *srv;
static int port;

static int start(void)
{
	CHECK(dri_store_server_start("127.0.0.1", 0, &srv) == DR_OK);
	port = dri_store_server_port(srv);
	CHECK(port > 0);
	return 0;
}

static int test_set_get_add(void)
{
	dri_store *c;
	void *v;
	size_t n;
	int64_t x;

	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, 5000, &c) == DR_OK);
	CHECK(dri_store_set(c, "addr/0", "10.0.0.1:5", 10) == DR_OK);
	CHECK(dri_store_get(c, "addr/0", &v, &n, 1000) == DR_OK);
	CHECK(n == 10 && !memcmp(v, "10.0.0.1:5", 10));
	CHECK(((char *)v)[10] == 0); /* NUL-terminated for convenience */
	free(v);
	/* binary values, overwritten */
	CHECK(dri_store_set(c, "bin", "a\0b", 3) == DR_OK);
	CHECK(dri_store_set(c, "bin", "\0\0\0\0", 4) == DR_OK);
	CHECK(dri_store_get(c, "bin", &v, &n, 1000) == DR_OK);
	CHECK(n == 4 && !memcmp(v, "\0\0\0\0", 4));
	free(v);
	CHECK(dri_store_add(c, "count", 1, &x) == DR_OK && x == 1);
	CHECK(dri_store_add(c, "count", 41, &x) == DR_OK && x == 42);
	CHECK(dri_store_add(c, "count", -2, NULL) == DR_OK);
	CHECK(dri_store_add(c, "count", 0, &x) == DR_OK && x == 40);
	dri_store_close(c);
	dri_store_server_stop(srv);
	return 0;
}

static void *later_set(void *arg)
{
	dri_store *c;

	(void)arg;
	if (dri_store_connect("127.0.0.1", port, 5000, &c))
		return NULL;
	/* The getter is parked on the server by now or soon: either way
	 * it must get the value. */
	dri_store_set(c, "late", "here", 4);
	dri_store_close(c);
	return NULL;
}

static int test_get_waits_for_set(void)
{
	dri_store *c;
	pthread_t t;
	void *v;
	size_t n;

	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, 5000, &c) == DR_OK);
	CHECK(pthread_create(&t, NULL, later_set, NULL) == 0);
	CHECK(dri_store_get(c, "late", &v, &n, 20000) == DR_OK);
	CHECK(n == 4 && !memcmp(v, "here", 4));
	free(v);
	pthread_join(t, NULL);
	dri_store_close(c);
	dri_store_server_stop(srv);
	return 0;
}

static int test_get_times_out_naming_key(void)
{
	dri_store *c;
	void *v;
	size_t n;

	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, 5000, &c) == DR_OK);
	CHECK(dri_store_get(c, "addr/7", &v, &n, 200) == DR_ETIMEDOUT);
	CHECKF(strstr(dr_last_error(), "'addr/7'"), "%s", dr_last_error());
	dri_store_close(c);
	dri_store_server_stop(srv);
	return 0;
}

static int test_server_gone_is_an_error(void)
{
	dri_store *c;
	void *v;
	size_t n;

	CHECK(start() == 0);
	CHECK(dri_store_connect("127.0.0.1", port, 5000, &c) == DR_OK);
	dri_store_server_stop(srv);
	dr_err e = dri_store_get(c, "x", &v, &n, 5000);
	CHECKF(e == DR_ECONN, "%s: %s", dr_err_name(e), dr_last_error());
	CHECK(strstr(dr_last_error(), "'x'"));
	dri_store_close(c);
	return 0;
}

static int test_connect_retries_then_times_out(void)
{
	dri_store *c;
	int p;

	CHECK(start() == 0);
	p = port;
	dri_store_server_stop(srv); /* nothing listens there now */
	dr_err e = dri_store_connect("127.0.0.1", p, 300, &c);
	CHECK(e == DR_ETIMEDOUT);
	CHECKF(strstr(dr_last_error(), "cannot reach the store at 127.0.0.1"),
	       "%s", dr_last_error());
	return 0;
}

static int test_port_taken(void)
{
	dri_store_server *other;

	CHECK(start() == 0);
	CHECK(dri_store_server_start("127.0.0.1", port, &other) == DR_ECONN);
	CHECK(strstr(dr_last_error(), "cannot host the store"));
	dri_store_server_stop(srv);
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_set_get_add),
	UNIT(test_get_waits_for_set),
	UNIT(test_get_times_out_naming_key),
	UNIT(test_server_gone_is_an_error),
	UNIT(test_connect_retries_then_times_out),
	UNIT(test_port_taken),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
