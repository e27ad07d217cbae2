/*
 * test_errors.c - error codes and messages.
 */
#include <pthread.h>
#include <string.h>

#include "error.h"
#include "runner.h"

static int test_every_code_has_a_name_and_message(void)
{
	for (int e = 0; e < DR_ERR_COUNT_; e++) {
		const char *s = dr_strerror((dr_err)e), *n = dr_err_name((dr_err)e);
		CHECK(s && *s && strcmp(s, "unknown error"));
		CHECK(!strncmp(n, "DR_", 3) && strlen(n) > 3);
		for (int f = 0; f < e; f++) {
			CHECKF(strcmp(s, dr_strerror((dr_err)f)), "%d and %d", e, f);
			CHECK(strcmp(n, dr_err_name((dr_err)f)));
		}
	}
	CHECK(!strcmp(dr_err_name(DR_EMISMATCH), "DR_EMISMATCH"));
	CHECK(!strcmp(dr_strerror(DR_OK), "success"));
	return 0;
}

static int test_out_of_range_codes(void)
{
	CHECK(!strcmp(dr_strerror((dr_err)-1), "unknown error"));
	CHECK(!strcmp(dr_strerror(DR_ERR_COUNT_), "unknown error"));
	CHECK(!strcmp(dr_err_name((dr_err)999), "DR_UNKNOWN"));
	return 0;
}

static int test_fail_records_the_message(void)
{
	CHECK(!strcmp(dr_last_error(), ""));
	CHECK(dri_fail(DR_EINVAL, "count %d is bad", 3) == DR_EINVAL);
	CHECK(!strcmp(dr_last_error(), "count 3 is bad"));
	/* a message may quote the previous one */
	dri_fail(DR_ECONN, "init: %s", dr_last_error());
	CHECK(!strcmp(dr_last_error(), "init: count 3 is bad"));
	return 0;
}

static int test_long_messages_are_cut(void)
{
	char big[5000];

	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	dri_fail(DR_EINVAL, "%s", big);
	CHECK(strlen(dr_last_error()) > 100 && strlen(dr_last_error()) < 5000);
	return 0;
}

static void *fail_elsewhere(void *arg)
{
	(void)arg;
	dri_fail(DR_EPEER, "the other thread's failure");
	return NULL;
}

static int test_messages_are_per_thread(void)
{
	pthread_t t;

	dri_fail(DR_EINVAL, "mine");
	CHECK(pthread_create(&t, NULL, fail_elsewhere, NULL) == 0);
	pthread_join(t, NULL);
	CHECK(!strcmp(dr_last_error(), "mine"));
	return 0;
}

static int test_calls_before_init_fail_cleanly(void)
{
	float x = 1;

	CHECK(dr_get_rank() == -1 && dr_get_world_size() == -1);
	CHECK(!dr_is_initialized());
	CHECK(dr_barrier(NULL, NULL, NULL, 0) == DR_ENOINIT);
	CHECK(dr_all_reduce(&x, 1, DR_FLOAT32, DR_SUM, NULL, NULL) == DR_ENOINIT);
	CHECK(strstr(dr_last_error(), "not been initialized"));
	CHECK(dr_destroy_process_group() == DR_ENOINIT);
	CHECK(dr_init_process_group("nccl", NULL) == DR_EINVAL);
	CHECK(strstr(dr_last_error(), "'nccl'"));
	CHECK(dr_init_process_group(NULL, "udp://h:1") == DR_EINVAL);
	CHECK(strstr(dr_last_error(), "file:///PATH"));
	CHECK(dr_init_process_group(NULL, "file://relative") == DR_EINVAL);
	CHECK(strstr(dr_last_error(), "file:///ABSOLUTE/PATH"));
	CHECK(dr_init_process_group(NULL, "tcp://host") == DR_EINVAL);
	CHECK(strstr(dr_last_error(), "tcp://HOST:PORT"));
	return 0;
}

static int test_coll_names(void)
{
	CHECK(!strcmp(dri_coll_name(DRI_ALL_REDUCE), "all_reduce"));
	CHECK(!strcmp(dri_coll_name(DRI_BARRIER), "barrier"));
	CHECK(!strcmp(dri_coll_name((dri_coll)0), "unknown"));
	CHECK(!strcmp(dri_coll_name(DRI_COLL_COUNT_), "unknown"));
	for (int c = 1; c < DRI_COLL_COUNT_; c++)
		CHECK(strcmp(dri_coll_name((dri_coll)c), "unknown"));
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_every_code_has_a_name_and_message),
	UNIT(test_out_of_range_codes),
	UNIT(test_fail_records_the_message),
	UNIT(test_long_messages_are_cut),
	UNIT(test_messages_are_per_thread),
	UNIT(test_calls_before_init_fail_cleanly),
	UNIT(test_coll_names),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
