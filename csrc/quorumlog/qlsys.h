/* Small POSIX helpers for _commitlog.pyx: open + posix_fallocate + mmap of a log file,
 * msync, zeroing a file range, writing at a position (pwrite/pwritev), and the wall clock. Plain C returning errno codes so the
 * Cython side can call them without the GIL and map ENOSPC to DiskFullError. */
#ifndef QL_SYS_H
#define QL_SYS_H
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/falloc.h>
#endif

static inline int64_t ql_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Open (creating when `create`), make the file exactly `size` bytes with every block
 * allocated (posix_fallocate: fails cleanly with ENOSPC instead of a later SIGBUS), then
 * map it shared read-write. A file longer than `size` is refused (EFBIG): files are never
 * shrunk. `*created` is set when this call created the file (the caller unlinks it again
 * when allocation fails). Returns 0 or an errno value. */
static int ql_map_file(const char *path, int64_t size, int create, int always_allocate,
                       void **out_addr, int *created) {
    int fd, r;
    struct stat st;
    void *p;
    *created = 0;
    fd = open(path, O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT && create) {
        fd = open(path, O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0644);
        if (fd >= 0) *created = 1;
    }
    if (fd < 0) return errno;
    if (fstat(fd, &st) != 0) { r = errno; close(fd); return r; }
    if (st.st_size > size) { close(fd); return EFBIG; }
    if (st.st_size < size || always_allocate) {
        r = posix_fallocate(fd, 0, size);
        if (r != 0) { close(fd); return r; }
    }
    p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { r = errno; close(fd); return r; }
    close(fd);   /* the mapping keeps the file referenced */
    *out_addr = p;
    return 0;
}

/* Read-only opens: map `size` bytes of the file copy-on-write (MAP_PRIVATE), so recovery's
 * in-memory repairs of a read-only log never reach the file. Bytes past the file's end (a
 * short or missing file) read as zero from an anonymous mapping underneath, instead of
 * raising SIGBUS. The file is opened O_RDONLY and nothing is allocated or created. */
static int ql_map_file_private(const char *path, int64_t size, void **out_addr) {
    int fd, r;
    struct stat st;
    void *p, *q;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) return errno;
    if (fd >= 0 && fstat(fd, &st) != 0) { r = errno; close(fd); return r; }
    if (fd >= 0 && st.st_size > size) { close(fd); return EFBIG; }
    p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { r = errno; if (fd >= 0) close(fd); return r; }
    if (fd >= 0 && st.st_size > 0) {
        q = mmap(p, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);
        if (q == MAP_FAILED) { r = errno; munmap(p, (size_t)size); close(fd); return r; }
    }
    if (fd >= 0) close(fd);
    *out_addr = p;
    return 0;
}

/* Test hook (the extensions' _fail_msync): after `ql_fault_skip` more msyncs, one msync fails
 * with `ql_fault_errno` without syncing anything, then msync works again -- what a device
 * error under the filesystem looks like: Linux reports a write-back error to one
 * msync/fsync and then clears it, so a retry returns 0 although the data never reached the
 * device. One copy per extension (a static in this header). */
static int ql_fault_errno = 0;
static int ql_fault_skip = 0;

static inline void ql_fail_msync(int err, int skip) {
    ql_fault_skip = skip;
    ql_fault_errno = err;
}

/* Test hook (the extensions' _gate_msync): the next msync (claimed by one thread) waits,
 * without the GIL, until _gate_release(err); then it fails with err, or syncs when err is 0.
 * Lets a test hold one flush inside msync while another one starts (overlapping flushes).
 * States: 0 off, 1 armed, 2 an msync is held, 3 released. */
static int ql_gate_state = 0;
static int ql_gate_err = 0;

static inline void ql_gate_arm(void) { __atomic_store_n(&ql_gate_state, 1, __ATOMIC_SEQ_CST); }
static inline int ql_gate_get(void) { return __atomic_load_n(&ql_gate_state, __ATOMIC_SEQ_CST); }
static inline void ql_gate_release(int err) {
    __atomic_store_n(&ql_gate_err, err, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ql_gate_state, 3, __ATOMIC_SEQ_CST);
}

static int ql_gate_wait(void) {
    int expected = 1, err;
    struct timespec ms = {0, 1000000};
    if (!__atomic_compare_exchange_n(&ql_gate_state, &expected, 2, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return 0;
    while (__atomic_load_n(&ql_gate_state, __ATOMIC_SEQ_CST) == 2) nanosleep(&ms, NULL);
    err = __atomic_exchange_n(&ql_gate_err, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ql_gate_state, 0, __ATOMIC_SEQ_CST);
    return err;
}

/* msync [off, off+len) of a mapping starting at `base` (page-aligned by mmap). */
static int ql_msync(char *base, int64_t off, int64_t len) {
    int64_t page = 4096, a = off & ~(page - 1);
    int gerr;
    if (len <= 0) return 0;
    if (ql_gate_state == 1 && (gerr = ql_gate_wait()) != 0) return gerr;
    if (ql_fault_errno) {
        if (ql_fault_skip > 0) {
            ql_fault_skip--;
        } else {
            int err = ql_fault_errno;
            ql_fault_errno = 0;
            return err;
        }
    }
    if (msync(base + a, (size_t)(off + len - a), MS_SYNC) != 0) return errno;
    return 0;
}

/* Make [off, off+len) of a mapped file read as zero. The page-aligned middle is zeroed
 * with fallocate(ZERO_RANGE) (metadata only, no page-cache fill: recovery of a 1 GiB
 * segment stays fast); where that is unsupported, only pages that are not already zero
 * are written. The partial pages at both ends are memset through the mapping. */
static int ql_zero_range(const char *path, char *base, int64_t off, int64_t len) {
    int64_t page = 4096, a, b, p;
    if (len <= 0) return 0;
    a = (off + page - 1) & ~(page - 1);
    b = (off + len) & ~(page - 1);
    if (b <= a) { memset(base + off, 0, (size_t)len); return 0; }
    memset(base + off, 0, (size_t)(a - off));
    memset(base + b, 0, (size_t)(off + len - b));
#ifdef FALLOC_FL_ZERO_RANGE
    {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            int r = fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, a, b - a);
            close(fd);
            if (r == 0) return 0;
        }
    }
#endif
    for (p = a; p < b; p += page) {
        const uint64_t *w = (const uint64_t *)(base + p);
        int64_t i, nz = 0;
        for (i = 0; i < page / 8; i++) if (w[i]) { nz = 1; break; }
        if (nz) memset(base + p, 0, (size_t)page);
    }
    return 0;
}

/* pwritev all of iov[0..n) at `off`, resuming after a short write or EINTR (iov is
 * modified). Writing the log with pwrite instead of through the mapping: a write that
 * covers whole pages of a fallocated (unwritten) extent fills the new page-cache pages
 * straight from the buffer, where a fault through the mapping first zeroes each page. The
 * blocks are fallocated, so this cannot fail for lack of space. Returns 0 or an errno. */
/* Test hook (the extension's _fail_write): the next pwrite of the log fails once with
 * `ql_write_fault` without writing anything. */
static int ql_write_fault = 0;

static inline void ql_fail_write(int err) {
    ql_write_fault = err;
}

static int ql_pwritev_all(int fd, struct iovec *iov, int n, int64_t off) {
    if (ql_write_fault) {
        int err = ql_write_fault;
        ql_write_fault = 0;
        return err;
    }
    while (n > 0) {
        ssize_t w = pwritev(fd, iov, n, off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (w == 0) return EIO;
        off += w;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static int ql_pwrite_all(int fd, const char *buf, int64_t len, int64_t off) {
    struct iovec v;
    v.iov_base = (void *)buf;
    v.iov_len = (size_t)len;
    return len > 0 ? ql_pwritev_all(fd, &v, 1, off) : 0;
}

/* Pre-fault pages for writing (Linux >= 5.14); errors are ignored by the caller. */
static int ql_populate_write(char *base, int64_t off, int64_t len) {
#ifdef MADV_POPULATE_WRITE
    if (madvise(base + off, (size_t)len, MADV_POPULATE_WRITE) != 0) return errno;
    return 0;
#else
    (void)base; (void)off; (void)len;
    return ENOSYS;
#endif
}
#endif
