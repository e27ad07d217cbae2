/*
 * rendezvous.c - fuzzes how a rank reads where its job is (rdzv.h): the
 * init_method ("env://", "tcp://HOST:PORT", "file:///PATH"), the env://
 * variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and the
 * rendezvous file rank 0 publishes ("HOST:PORT PID NODE"), which another
 * user's process could have written.
 *
 * Input: a byte choosing what the rest is: 0 an init_method; 1 the four
 * variables, NUL-separated; 2 the content of the rendezvous file.
 * Properties: an accepted plan has a rank below its size, a host that is
 * a non-empty string, a port in 1..65535 (tcp://, env://, a file read)
 * and an absolute path (file://); a refused one leaves a message.
 */
#include <fcntl.h>
#include <unistd.h>

#include "rdzv.h"
#include "fuzz.h"

static const char *const vars[] = { "RANK", "WORLD_SIZE", "MASTER_ADDR",
				    "MASTER_PORT" };
static char file_path[64];

static void remove_file(void)
{
	unlink(file_path);
}

/* No launcher's variables but those the input sets; a file of our own
 * for the published address, removed at exit. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char *const others[] = {
		"LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
		"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
		"SLURM_NTASKS", "PMIX_RANK", "TORCHELASTIC_USE_AGENT_STORE",
	};
	int fd;

	(void)argc, (void)argv;
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		unsetenv(others[i]);
	for (size_t i = 0; i < 4; i++)
		unsetenv(vars[i]);
	snprintf(file_path, sizeof(file_path), "/tmp/distrun-fuzz-rdzv.XXXXXX");
	fd = mkstemp(file_path);
	FUZZ_CHECK(fd >= 0);
	close(fd);
	atexit(remove_file);
	return 0;
}

static void check_plan(dr_err err, const dri_rdzv_plan *p)
{
	if (err) {
		FUZZ_CHECK(dr_last_error()[0] != 0);
		return;
	}
	FUZZ_CHECK(p->rank >= 0 && p->rank < p->size);
	FUZZ_CHECK(memchr(p->host, 0, sizeof(p->host)));
	if (p->mode == DRI_RDZV_FILE) {
		FUZZ_CHECK(p->path[0] == '/');
	} else {
		FUZZ_CHECK(p->host[0]);
		FUZZ_CHECK(p->port >= 1 && p->port <= 65535);
	}
}

static void read_file(const uint8_t *data, size_t size)
{
	dri_rdzv_plan p;
	int fd = open(file_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	dr_err err;

	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(write(fd, data, size) == (ssize_t)size);
	close(fd);
	memset(&p, 0, sizeof(p));
	p.mode = DRI_RDZV_FILE;
	p.rank = 1;
	p.size = 2;
	snprintf(p.path, sizeof(p.path), "%s", file_path);
	/* 1 ms: a file naming a dead writer of this host is waited past. */
	err = dri_rdzv_lookup(&p, 1);
	if (!err) {
		FUZZ_CHECK(p.host[0] && memchr(p.host, 0, sizeof(p.host)));
		FUZZ_CHECK(p.port >= 1 && p.port <= 65535);
	} else {
		FUZZ_CHECK(dr_last_error()[0] != 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dri_rdzv_plan p;
	char *text;

	if (size < 1)
		return 0;
	if (data[0] % 3 == 2) {
		read_file(data + 1, size - 1);
		return 0;
	}
	text = fuzz_cstr(data + 1, size - 1);
	if (!text)
		return 0;
	if (data[0] % 3 == 0) {
		check_plan(dri_rdzv_plan_make(text, 0, 1, &p), &p);
	} else {
		const char *v = text;
		for (size_t i = 0; i < 4; i++) {
			if (v <= text + size - 1) {
				setenv(vars[i], v, 1);
				v += strlen(v) + 1;
			} else {
				unsetenv(vars[i]);
			}
		}
		check_plan(dri_rdzv_plan_make("env://", -1, 0, &p), &p);
		for (size_t i = 0; i < 4; i++)
			unsetenv(vars[i]);
	}
	free(text);
	return 0;
}
