/* libch-placement's ring looked up in random order (issue 18, scripts/bench-lookups.sh).
 *
 * ch-placement-benchmark draws its object ids at random and then sorts them before the timed
 * loop, so consecutive lookups walk the ring in order and share cache lines and branch
 * outcomes. This driver draws ids the same way (ch_placement_random_u64 after srandom with the
 * benchmark's seed), shuffles them, and times the same calls in that order: the anchor under
 * the conditions of `optio sim attributed-cost --key-order random`.
 *
 * Usage: libch-shuffled NODES IDS REPLICAS VNODES   -> prints the seconds of one timed pass
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ch-placement.h"

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s NODES IDS REPLICAS VNODES\n", argv[0]);
        return 2;
    }
    int nodes = atoi(argv[1]), ids = atoi(argv[2]), replicas = atoi(argv[3]), vnodes = atoi(argv[4]);
    if (nodes < 1 || ids < 1 || replicas < 1 || replicas > nodes || vnodes < 1) {
        fprintf(stderr, "%s: NODES, IDS, VNODES positive and REPLICAS from 1 to NODES\n", argv[0]);
        return 2;
    }
    struct ch_placement_instance *ring = ch_placement_initialize("ring", nodes, vnodes, 0);
    uint64_t *oids = malloc(sizeof(*oids) * (size_t)ids);
    unsigned long *out = malloc(sizeof(*out) * (size_t)ids * (size_t)replicas);
    if (!ring || !oids || !out) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    srandom(8675309);
    for (int i = 0; i < ids; i++)
        oids[i] = ch_placement_random_u64();
    for (int i = ids - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(random() % (i + 1));
        uint64_t t = oids[i];
        oids[i] = oids[j];
        oids[j] = t;
    }
    double start = seconds();
    for (int i = 0; i < ids; i++)
        ch_placement_find_closest(ring, oids[i], (unsigned)replicas, out + (size_t)i * replicas);
    double elapsed = seconds() - start;
    unsigned long sink = 0;
    for (size_t i = 0; i < (size_t)ids * replicas; i++)
        sink += out[i];
    printf("%.6f\n", elapsed);
    fprintf(stderr, "# checksum %lu\n", sink);
    ch_placement_finalize(ring);
    return 0;
}
