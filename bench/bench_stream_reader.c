/* bench_stream_reader: many GET /v1/stream subscribers in one process, a
 * lean reader for bench/bench_stream.py (its subscribers were one curl and
 * one grep each: 200 processes and two pipe copies per subscriber on a
 * 2-core machine measure the readers, not the ingest).
 *
 *   bench_stream_reader PORT TOKEN WANT QUERY...
 *
 * Opens one connection per QUERY (GET /v1/stream?QUERY), reads them all
 * with epoll (every byte read and scanned: a real consumer), counts the
 * SSE lines that start with "id: " (one per event, as `grep -c '^id: '`
 * did) and, on SIGTERM or when every connection has ended, prints each
 * connection's count on its line, in QUERY order, then "all T": the
 * CLOCK_MONOTONIC time (s) when the last connection had WANT events (-1:
 * not all did), and exits; also as soon as every connection has WANT
 * events or has ended (WANT > 0). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

typedef struct reader {
    int fd;
    long count;
    char tail[4]; /* the last 4 bytes read before: a "\nid: " cut by a read */
} reader;

/* Counts "\nid: " in the tail then p (at p - 4 in a buffer with room
 * before it): a match within the last read's 4 tail bytes cannot be whole
 * (5 bytes), so none is counted twice. */
static void scan(reader *r, char *p, size_t n)
{
    char *b = p - 4;
    memcpy(b, r->tail, 4);
    char *end = p + n;
    for (char *q = b; (q = memchr(q, '\n', (size_t)(end - q))) != NULL; q++)
        if (end - q >= 5 && !memcmp(q + 1, "id: ", 4))
            r->count++;
    memcpy(r->tail, end - 4, 4);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: bench_stream_reader PORT TOKEN WANT QUERY...\n");
        return 2;
    }
    int port = atoi(argv[1]), n = argc - 4;
    long want = atol(argv[3]);
    int short_n = n, waiting = n; /* short of WANT; and of those, still open */
    double t_all = -1;
    signal(SIGTERM, on_term);
    signal(SIGPIPE, SIG_IGN);
    reader *rs = calloc((size_t)n, sizeof *rs);
    int ep = epoll_create1(0);
    if (!rs || ep < 0)
        return 1;
    for (int i = 0; i < n; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
            perror("connect");
            return 1;
        }
        char req[8192];
        int l = snprintf(req, sizeof req, "GET /v1/stream?%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
                         argv[4 + i], argv[2]);
        if (l <= 0 || (size_t)l >= sizeof req || write(fd, req, (size_t)l) != l) {
            perror("write");
            return 1;
        }
        rs[i] = (reader){.fd = fd};
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    static char buf[4 + (1 << 20)];
    int open_n = n;
    while (!stop && open_n > 0 && !(want > 0 && waiting == 0)) {
        struct epoll_event evs[64];
        int k = epoll_wait(ep, evs, 64, 1000);
        if (k < 0 && errno == EINTR)
            continue;
        for (int j = 0; j < k; j++) {
            reader *r = &rs[evs[j].data.u32];
            ssize_t got = read(r->fd, buf + 4, sizeof buf - 4);
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (got <= 0) {
                waiting -= r->count < want;
                epoll_ctl(ep, EPOLL_CTL_DEL, r->fd, NULL);
                close(r->fd);
                r->fd = -1;
                open_n--;
                continue;
            }
            long before = r->count;
            scan(r, buf + 4, (size_t)got);
            if (before < want && r->count >= want)
                waiting--;
            if (before < want && r->count >= want && --short_n == 0) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                t_all = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
            }
        }
    }
    for (int i = 0; i < n; i++)
        printf("%ld\n", rs[i].count);
    printf("all %.6f\n", t_all);
    return 0;
}
