/* A helper thread for append_batch: it performs a big batch's pwritev calls while the
 * appending thread CRCs and encodes the next pieces, so the copy into the page cache (page
 * allocation included, which the appending thread used to find done by the preparer's
 * zero-filling populate) overlaps the encoding instead of following it. One writer per
 * log. The appending thread posts pieces into a queue of up to QL_WRITER_SLOTS (each
 * piece in a staging buffer and iovec array of its own), keeps encoding into the next
 * free one, and waits for the oldest piece only when it needs that piece's buffer back or
 * the batch ends; the thread writes the queue in order without sleeping between pieces.
 * (With two buffers, one piece in flight, the appending thread often got to its wait
 * before the thread had even woken up on this 2-vCPU VM, and wrote about half the pieces
 * itself.) A piece the thread has not started by then (it was not scheduled: a busy
 * machine) is taken back and written by the appending thread itself, so a batch never
 * waits for the writer thread to get a processor -- at worst it writes inline, as without
 * the thread. One piece is written at a time, in log order, by whichever side has it: a
 * kill -9 mid-batch then leaves a torn tail, never a torn piece with an intact one after
 * it (which recovery would read as damage in the middle). Plain C (pthreads) so both sides
 * run without the GIL. */
#ifndef QL_WRITER_H
#define QL_WRITER_H
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include "qlsys.h"

#define QL_WRITER_SLOTS 4

typedef struct ql_job {
    int fd, n;
    struct iovec *iov;
    int64_t off;
} ql_job;

typedef struct ql_writer {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* the thread waits for a job */
    pthread_cond_t done;      /* the appending thread waits for the oldest job */
    int stop, err;
    ql_job q[QL_WRITER_SLOTS];
    uint64_t head, tail;      /* unfinished jobs: q[head % SLOTS] .. q[(tail - 1) % SLOTS] */
    int running;              /* job `head` is being written (by the thread, or taken back) */
    int64_t n_jobs, n_taken_back;   /* counters (stats) */
} ql_writer;

/* Write the oldest unfinished job (w->mu held, `running` clear), by whichever side calls:
 * `running` is set while the lock is dropped for the write, so the other side starts no
 * piece meanwhile (one piece at a time, in log order); then the job is finished and
 * `wake` broadcast -- `done` from the thread (the appending thread may wait for the job),
 * `cv` from a take-back (the thread may go on with the next). */
static void ql_writer_write_head(ql_writer *w, pthread_cond_t *wake) {
    ql_job j = w->q[w->head % QL_WRITER_SLOTS];
    int err;
    w->running = 1;
    pthread_mutex_unlock(&w->mu);
    err = ql_pwritev_all(j.fd, j.iov, j.n, j.off);
    pthread_mutex_lock(&w->mu);
    if (err && !w->err) w->err = err;
    w->running = 0;
    w->head++;
    pthread_cond_broadcast(wake);
}

static void *ql_writer_main(void *arg) {
    ql_writer *w = (ql_writer *)arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        /* (running while the thread waits: the appending thread writes a piece it took back;
         * the next piece starts only after it, so pieces reach the file in log order) */
        while ((w->head == w->tail || w->running) && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->head == w->tail) break;             /* stop, nothing pending */
        if (w->running) {                          /* (stop: never during a take-back) */
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        ql_writer_write_head(w, &w->done);
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
    pthread_cond_init(&w->done, NULL);
    if (pthread_create(&w->th, NULL, ql_writer_main, w) != 0) {
        pthread_cond_destroy(&w->done);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    return w;
}

/* Wait until at most `keep` posted jobs are unfinished -> the errno of a job finished
 * meanwhile (or earlier: an error is reported once), or 0. The oldest job, when the thread
 * has not started it, is taken back and written here. */
static int ql_writer_wait(ql_writer *w, int keep) {
    int err;
    pthread_mutex_lock(&w->mu);
    while (w->tail - w->head > (uint64_t)keep) {
        if (!w->running) {
            /* taken back: written here while `running` keeps the thread off the next piece
             * (two pieces written at once could leave, after a kill -9, a torn piece with an
             * intact one after it: what recovery reads as damage, not a torn tail) */
            w->n_taken_back++;
            ql_writer_write_head(w, &w->cv);
        } else {
            pthread_cond_wait(&w->done, &w->mu);
        }
    }
    err = w->err;
    w->err = 0;
    pthread_mutex_unlock(&w->mu);
    return err;
}

/* Queue pwritev(fd, iov[0..n), off); the caller has made room (ql_writer_wait with keep
 * below QL_WRITER_SLOTS) and keeps iov and what it points to untouched until a wait
 * leaves this job finished. */
static void ql_writer_post(ql_writer *w, int fd, struct iovec *iov, int n, int64_t off) {
    ql_job *j;
    pthread_mutex_lock(&w->mu);
    j = &w->q[w->tail % QL_WRITER_SLOTS];
    j->fd = fd;
    j->iov = iov;
    j->n = n;
    j->off = off;
    w->tail++;
    w->n_jobs++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Finish the pending jobs, stop and join the thread, free. */
static void ql_writer_free(ql_writer *w) {
    if (w == NULL) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_cond_destroy(&w->done);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
#endif
