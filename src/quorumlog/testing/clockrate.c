/* Clock-rate skew for one replica process (LD_PRELOAD; quorumlog.testing.clockskew).
 *
 * CLOCK_MONOTONIC (and _RAW, BOOTTIME), as the process reads it through libc's
 * clock_gettime, runs at `rate` times real time from an anchor:
 *     virtual = anchor_virt_ns + (real - anchor_real_ns) * rate
 * The harness sets rate and anchors in a 32-byte control file, $QUORUMLOG_CLOCK_DIR/<pid>,
 * read here through a shared mapping under a sequence counter (odd: being written). Until
 * that file exists (looked for at most every 50 ms) the clock is the real one. Only for
 * fault testing: the replica's time.monotonic() and its event loop's time go through here;
 * kernel timeouts (a condition variable's wait) still run in real time. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct control {
    volatile uint64_t seq;
    volatile double rate;
    volatile int64_t anchor_real_ns;
    volatile int64_t anchor_virt_ns;
};

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static char control_path[4096];
static struct control *volatile ctl;
static volatile int64_t next_look_ns;

__attribute__((constructor)) static void clockrate_init(void) {
    real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    const char *dir = getenv("QUORUMLOG_CLOCK_DIR");
    if (dir != NULL && strlen(dir) < sizeof(control_path) - 32)
        snprintf(control_path, sizeof(control_path), "%s/%ld", dir, (long)getpid());
}

static void look_for_control(int64_t now_ns) {
    if (control_path[0] == 0 || now_ns < next_look_ns)
        return;
    next_look_ns = now_ns + 50 * 1000000LL;
    int fd = open(control_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    void *p = mmap(NULL, sizeof(struct control), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p != MAP_FAILED)
        ctl = (struct control *)p;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int r = real_clock_gettime(id, ts);
    if (r != 0 || (id != CLOCK_MONOTONIC && id != CLOCK_MONOTONIC_RAW && id != CLOCK_BOOTTIME))
        return r;
    int64_t now = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
    struct control *c = ctl;
    if (c == NULL) {
        look_for_control(now);
        c = ctl;
        if (c == NULL)
            return r;
    }
    uint64_t s1, s2;
    double rate;
    int64_t ar, av;
    do {
        s1 = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
        rate = c->rate;
        ar = c->anchor_real_ns;
        av = c->anchor_virt_ns;
        s2 = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
    } while ((s1 & 1) || s1 != s2);
    if (s1 == 0)
        return r;                  /* never written */
    int64_t v = av + (int64_t)((double)(now - ar) * rate);
    ts->tv_sec = v / 1000000000LL;
    ts->tv_nsec = v % 1000000000LL;
    return r;
}
