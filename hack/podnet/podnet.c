/*
 * podnet: an LD_PRELOAD shim that gives a process started by the embedded kubelet its pod's address.
 *
 * Pods on the embedded cluster share the machine's network, so two pods that both listen on 0.0.0.0:8080
 * would collide. Every listener ends in libc bind(): Python's socket module (uvicorn, aiohttp) and gRPC's
 * C core alike. This bind() replaces the wildcard address (INADDR_ANY, or in6addr_any as the v4-mapped
 * ::ffff:<pod IP> on a dual-stack AF_INET6 socket) with the pod IP named by TOLLGATE_POD_IP. 127.0.0.1 (or
 * ::ffff:127.0.0.1) is the pod's own loopback in a real pod, which two pods here would share: it becomes the
 * pod IP too (tollgate-xds's debug API listens on 127.0.0.1, and two replicas meet in a rollout). Every other
 * address, and every call when the variable is unset or not an IPv4 address, goes through unchanged.
 * An IPV6_V6ONLY socket is left alone: it cannot take a v4-mapped address and the pods have no IPv6 one.
 *
 * Built by hack/tools.sh into the tools bin directory: gcc -shared -fPIC -O2 -o libpodnet.so podnet.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static bind_fn real_bind;
static struct in_addr pod_ip;
static int have_pod_ip;

__attribute__((constructor)) static void podnet_init(void) {
    real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *ip = getenv("TOLLGATE_POD_IP");
    have_pod_ip = ip != NULL && inet_pton(AF_INET, ip, &pod_ip) == 1;
}

static int v6only(int fd) {
    int value = 0;
    socklen_t size = sizeof value;
    return getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &value, &size) == 0 && value;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    if (real_bind == NULL) {
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    }
    if (have_pod_ip && addr != NULL) {
        if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
            struct sockaddr_in in;
            memcpy(&in, addr, sizeof in);
            if (in.sin_addr.s_addr == htonl(INADDR_ANY) || in.sin_addr.s_addr == htonl(INADDR_LOOPBACK)) {
                in.sin_addr = pod_ip;
                return real_bind(fd, (const struct sockaddr *)&in, sizeof in);
            }
        } else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
            struct sockaddr_in6 in6;
            memcpy(&in6, addr, sizeof in6);
            const uint32_t loopback = htonl(INADDR_LOOPBACK);
            int mapped_loopback = IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr) &&
                                  memcmp(&in6.sin6_addr.s6_addr[12], &loopback, sizeof loopback) == 0;
            if ((IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr) && !v6only(fd)) || mapped_loopback) {
                memset(&in6.sin6_addr, 0, sizeof in6.sin6_addr);
                in6.sin6_addr.s6_addr[10] = 0xff;
                in6.sin6_addr.s6_addr[11] = 0xff;
                memcpy(&in6.sin6_addr.s6_addr[12], &pod_ip, sizeof pod_ip);
                return real_bind(fd, (const struct sockaddr *)&in6, sizeof in6);
            }
        }
    }
    return real_bind(fd, addr, len);
}
