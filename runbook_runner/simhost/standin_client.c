/* A stand-in on the simulated host's PATH: standin_client NAME ARGS...
 *
 * It asks the host's stand-in server ($RBR_SIM_SOCKET) to run NAME over the simulated
 * state, prints what it answers and exits with its status: a C twin of standin_client.py,
 * built when a C compiler is at hand, because a stand-in call then costs a millisecond.
 * Request: LC_ALL, then each argument, each ended by a NUL byte.
 * Reply: "STATUS STDOUT_LENGTH\n", then stdout, then stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int write_all(int fd, const char *data, size_t size) {
    while (size > 0) {
        ssize_t n = write(fd, data, size);
        if (n <= 0) return -1;
        data += n;
        size -= (size_t)n;
    }
    return 0;
}

static int unanswered(const char *name, const char *why) {
    fprintf(stderr, "%s: the simulated host does not answer (%s)\n", name, why);
    return 126;
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "stand-in";
    const char *path = getenv("RBR_SIM_SOCKET");
    if (path == NULL) return unanswered(name, "no RBR_SIM_SOCKET");
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un address;
    memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    strncpy(address.sun_path, path, sizeof address.sun_path - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) < 0)
        return unanswered(name, "cannot connect");
    const char *lc_all = getenv("LC_ALL");
    if (lc_all == NULL) lc_all = "";
    if (write_all(fd, lc_all, strlen(lc_all) + 1) < 0) return unanswered(name, "write");
    for (int i = 1; i < argc; i++)
        if (write_all(fd, argv[i], strlen(argv[i]) + 1) < 0) return unanswered(name, "write");
    shutdown(fd, SHUT_WR);
    size_t size = 0, capacity = 65536;
    char *reply = malloc(capacity);
    for (;;) {
        if (reply == NULL) return unanswered(name, "out of memory");
        if (size == capacity) reply = realloc(reply, capacity *= 2);
        if (reply == NULL) return unanswered(name, "out of memory");
        ssize_t n = read(fd, reply + size, capacity - size);
        if (n < 0) return unanswered(name, "read");
        if (n == 0) break;
        size += (size_t)n;
    }
    char *end = memchr(reply, '\n', size);
    int status = 0;
    unsigned long out = 0;
    if (end == NULL || sscanf(reply, "%d %lu", &status, &out) != 2) return unanswered(name, "reply");
    char *body = end + 1;
    size_t rest = size - (size_t)(body - reply);
    if (out > rest) out = rest;
    write_all(1, body, out);
    write_all(2, body + out, rest - out);
    return status;
}
