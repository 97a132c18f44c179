/* A helper thread for append_batch: it performs a big batch's pwritev calls while the
 * appending thread CRCs and encodes the next piece, so the copy into the page cache (page
 * allocation included, which the appending thread used to find done by the preparer's
 * zero-filling populate) overlaps the encoding instead of following it. One writer per
 * log, one job at a time; the appending thread posts a piece, keeps encoding into its
 * other staging buffer, and waits for the job before it reuses a buffer or returns.
 * A job the thread has not started by then (it was not scheduled: a busy machine) is
 * taken back and written by the appending thread itself, so a batch never waits for the
 * writer thread to get a processor -- at worst it writes inline, as without the thread.
 * Plain C (pthreads) so both sides run without the GIL. */
#ifndef QL_WRITER_H
#define QL_WRITER_H
#include <pthread.h>
#include <stdlib.h>
#include "qlsys.h"

typedef struct ql_writer {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, err;
    int busy;                 /* 0: no job, 1: posted, 2: being written by the thread */
    int fd, n;
    struct iovec *iov;
    int64_t off;
} ql_writer;

static void *ql_writer_main(void *arg) {
    ql_writer *w = (ql_writer *)arg;
    int err;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->busy != 1 && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
        if (w->busy != 1) break;                   /* stop, nothing pending */
        w->busy = 2;
        pthread_mutex_unlock(&w->mu);
        err = ql_pwritev_all(w->fd, w->iov, w->n, w->off);
        pthread_mutex_lock(&w->mu);
        if (err && !w->err) w->err = err;
        w->busy = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* A started writer, or NULL (no memory, no thread): the caller then writes itself. */
static ql_writer *ql_writer_new(void) {
    ql_writer *w = (ql_writer *)calloc(1, sizeof(ql_writer));
    if (w == NULL) return NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->th, NULL, ql_writer_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    return w;
}

/* Finish the posted job (if any) -> its errno, or 0; the error is reported once. A job
 * the thread has not started is written here instead. */
static int ql_writer_wait(ql_writer *w) {
    int err;
    pthread_mutex_lock(&w->mu);
    if (w->busy == 1) {
        w->busy = 0;                       /* taken back: the thread will not see it */
        pthread_mutex_unlock(&w->mu);
        return ql_pwritev_all(w->fd, w->iov, w->n, w->off);
    }
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
    err = w->err;
    w->err = 0;
    pthread_mutex_unlock(&w->mu);
    return err;
}

/* Post pwritev(fd, iov[0..n), off); the caller has waited for the previous job and keeps
 * iov and what it points to untouched until the next wait. */
static void ql_writer_post(ql_writer *w, int fd, struct iovec *iov, int n, int64_t off) {
    pthread_mutex_lock(&w->mu);
    w->fd = fd;
    w->iov = iov;
    w->n = n;
    w->off = off;
    w->busy = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Finish the pending job, stop and join the thread, free. */
static void ql_writer_free(ql_writer *w) {
    if (w == NULL) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
#endif
