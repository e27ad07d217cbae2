/*
 * coll_sched.c - plays the schedules of runtime/coll.h for every world size
 * up to a bound, without a network, and checks that every rank sends only
 * what it holds and ends with exactly what the collective promises.
 */
#include <stdint.h>

#include "runner.h"
#include "coll.h"

#define PMAX 40

static int test_block_off(void)
{
	for (int p = 1; p <= PMAX; p++)
		for (size_t count = 0; count < 100; count++) {
			CHECK(dri_block_off(count, p, 0) == 0);
			CHECK(dri_block_off(count, p, p) == count);
			for (int i = 0; i < p; i++) {
				size_t n = dri_block_off(count, p, i + 1) -
					   dri_block_off(count, p, i);
				CHECK(n == count / (size_t)p || n == count / (size_t)p + 1);
			}
		}
	return 0;
}

/* Subtree size of relative rank vr as the algorithms compute it. */
static int span_of(int vr, int p)
{
	return vr ? dri_binom_subtree(vr, dri_binom_limit(vr, p), p) : p;
}

static int test_binomial_tree(void)
{
	for (int p = 1; p <= 70; p++) {
		int parent_count[70] = { 0 };
		for (int vr = 0; vr < p; vr++) {
			int sum = 1;
			for (int m = 1; m < dri_binom_limit(vr, p) && vr + m < p;
			     m <<= 1) {
				int c = vr + m;
				CHECKF(dri_binom_parent(c) == vr, "p=%d c=%d", p, c);
				parent_count[c]++;
				/* the child's subtree starts right where the
				 * ones of the smaller children ended */
				CHECK(c == vr + sum);
				CHECK(dri_binom_subtree(c, m, p) == span_of(c, p));
				sum += dri_binom_subtree(c, m, p);
			}
			CHECKF(sum == span_of(vr, p), "p=%d vr=%d sum=%d span=%d",
			       p, vr, sum, span_of(vr, p));
		}
		for (int vr = 1; vr < p; vr++)
			CHECK(parent_count[vr] == 1);
	}
	return 0;
}

static int test_ring_all_gather(void)
{
	for (int p = 1; p <= PMAX; p++) {
		static uint8_t have[PMAX][PMAX];
		memset(have, 0, sizeof(have));
		for (int r = 0; r < p; r++)
			have[r][r] = 1;
		for (int s = 0; s < p - 1; s++) {
			uint8_t next[PMAX][PMAX];
			memcpy(next, have, sizeof(next));
			for (int r = 0; r < p; r++) {
				int b = dri_ring_ag_send(r, s, p);
				CHECKF(have[r][b], "p=%d r=%d s=%d", p, r, s);
				int to = dri_mod(r + 1, p);
				/* the receiver expects exactly this block */
				CHECK(dri_ring_ag_send(to - 1, s, p) == b);
				CHECK(!have[to][b]);
				next[to][b] = 1;
			}
			memcpy(have, next, sizeof(next));
		}
		for (int r = 0; r < p; r++)
			for (int b = 0; b < p; b++)
				CHECK(have[r][b]);
	}
	return 0;
}

static int test_recursive_doubling(void)
{
	for (int p = 1; p <= 64; p <<= 1) {
		static uint8_t have[64][64];
		memset(have, 0, sizeof(have));
		for (int r = 0; r < p; r++)
			have[r][r] = 1;
		for (int d = 1; d < p; d <<= 1) {
			uint8_t next[64][64];
			memcpy(next, have, sizeof(next));
			for (int r = 0; r < p; r++) {
				int partner = r ^ d, s = dri_rd_start(r, d);
				for (int b = s; b < s + d; b++) {
					CHECK(have[r][b]);
					CHECK(!have[partner][b]);
					next[partner][b] = 1;
				}
				/* what the partner receives is where it expects */
				CHECK(dri_rd_start(partner ^ d, d) == s);
			}
			memcpy(have, next, sizeof(next));
		}
		for (int r = 0; r < p; r++)
			for (int b = 0; b < p; b++)
				CHECK(have[r][b]);
	}
	return 0;
}

static int test_bruck(void)
{
	for (int p = 1; p <= PMAX; p++) {
		static int slot[PMAX][PMAX]; /* block held in each slot, -1 none */
		int held = 1;
		for (int r = 0; r < p; r++)
			for (int i = 0; i < p; i++)
				slot[r][i] = i ? -1 : r;
		for (int d = 1; d < p; d <<= 1) {
			int next[PMAX][PMAX], n = dri_bruck_n(d, p);
			memcpy(next, slot, sizeof(next));
			CHECK(held == d);
			for (int r = 0; r < p; r++) {
				int to = dri_mod(r - d, p);
				for (int i = 0; i < n; i++) {
					CHECK(slot[r][i] >= 0);
					CHECK(slot[to][d + i] == -1);
					next[to][d + i] = slot[r][i];
				}
			}
			memcpy(slot, next, sizeof(next));
			held += n;
		}
		for (int r = 0; r < p; r++)
			for (int i = 0; i < p; i++)
				CHECKF(slot[r][i] == dri_mod(r + i, p),
				       "p=%d r=%d i=%d", p, r, i);
	}
	return 0;
}

/* Every rank's partial sum of every block: which ranks it contains, and how
 * many contributions (to catch one counted twice). */
struct partial { uint64_t who; int n; };

static int test_recursive_halving(void)
{
	for (int p = 1; p <= 32; p <<= 1) {
		static struct partial acc[32][32];
		for (int r = 0; r < p; r++)
			for (int b = 0; b < p; b++)
				acc[r][b] = (struct partial){ 1ull << r, 1 };
		for (int d = p / 2; d >= 1; d /= 2) {
			struct partial next[32][32];
			memcpy(next, acc, sizeof(next));
			for (int r = 0; r < p; r++) {
				int partner = r ^ d;
				int ks = dri_rh_keep(r, d), ss = dri_rh_keep(partner, d);
				CHECK(ks <= r && r < ks + d);
				CHECK(ss != ks);
				/* r receives the partner's copy of its kept half */
				for (int b = ks; b < ks + d; b++) {
					CHECK(!(acc[r][b].who & acc[partner][b].who));
					next[r][b].who |= acc[partner][b].who;
					next[r][b].n += acc[partner][b].n;
				}
			}
			memcpy(acc, next, sizeof(next));
		}
		for (int r = 0; r < p; r++) {
			CHECK(acc[r][r].n == p);
			CHECK(acc[r][r].who == (p == 64 ? ~0ull : (1ull << p) - 1));
		}
	}
	return 0;
}

static int test_pairwise(void)
{
	for (int p = 1; p <= PMAX; p++)
		for (int r = 0; r < p; r++) {
			uint8_t to_seen[PMAX] = { 0 }, from_seen[PMAX] = { 0 };
			for (int k = 1; k < p; k++) {
				int to = dri_pair_to(r, k, p);
				CHECK(to != r && !to_seen[to]);
				to_seen[to] = 1;
				CHECK(dri_pair_from(to, k, p) == r);
				int from = dri_pair_from(r, k, p);
				CHECK(from != r && !from_seen[from]);
				from_seen[from] = 1;
			}
		}
	return 0;
}

static const struct unit_test tests[] = {
	UNIT(test_block_off),
	UNIT(test_binomial_tree),
	UNIT(test_ring_all_gather),
	UNIT(test_recursive_doubling),
	UNIT(test_bruck),
	UNIT(test_recursive_halving),
	UNIT(test_pairwise),
	{ 0 },
};

int main(int argc, char **argv)
{
	return unit_run(tests, argc, argv);
}
