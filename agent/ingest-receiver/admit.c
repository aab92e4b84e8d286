/* Admission of unauthenticated connections: see admit.h. */
#include "admit.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

struct admit {
    pthread_mutex_t lock;
    admit_entry **tab; /* the waiting connections, in no order */
    unsigned n, max_total, max_per_addr;
    uint64_t seq;
};

admit *admit_create(unsigned max_total, unsigned max_per_addr)
{
    if (max_total == 0)
        max_total = 1;
    admit *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    if ((a->tab = calloc(max_total, sizeof(*a->tab))) == NULL) {
        free(a);
        return NULL;
    }
    pthread_mutex_init(&a->lock, NULL);
    a->max_total = max_total;
    a->max_per_addr = max_per_addr ? max_per_addr : 1;
    return a;
}

void admit_destroy(admit *a)
{
    if (a == NULL)
        return;
    pthread_mutex_destroy(&a->lock);
    free(a->tab);
    free(a);
}

static unsigned count_addr(const admit *a, const char *addr)
{
    unsigned k = 0;
    for (unsigned i = 0; i < a->n; i++)
        k += strcmp(a->tab[i]->addr, addr) == 0;
    return k;
}

/* Has e sent anything?  Its thread may not have looked yet: ask the socket. */
static int has_spoken(admit_entry *e)
{
    int pending = 0;
    if (!e->spoke && ioctl(e->fd, FIONREAD, &pending) == 0 && pending > 0)
        e->spoke = 1;
    return e->spoke;
}

/* The one to drop among those of addr (NULL: of any address): oldest silent, else oldest. */
static unsigned pick(admit *a, const char *addr)
{
    unsigned best = a->n, best_silent = a->n;
    for (unsigned i = 0; i < a->n; i++) {
        admit_entry *e = a->tab[i];
        if (addr != NULL && strcmp(e->addr, addr) != 0)
            continue;
        if (best == a->n || e->seq < a->tab[best]->seq)
            best = i;
        if (!has_spoken(e) && (best_silent == a->n || e->seq < a->tab[best_silent]->seq))
            best_silent = i;
    }
    return best_silent < a->n ? best_silent : best;
}

static void remove_at(admit *a, unsigned i)
{
    a->tab[i]->in = 0;
    a->tab[i] = a->tab[--a->n];
}

void admit_enter(admit *a, admit_entry *e, char *dropped_addr, size_t cap)
{
    if (cap > 0)
        dropped_addr[0] = '\0';
    pthread_mutex_lock(&a->lock);
    unsigned victim = a->n;
    if (count_addr(a, e->addr) >= a->max_per_addr) {
        victim = pick(a, e->addr);
    } else if (a->n >= a->max_total) {
        /* no address holds more than its share, so the oldest silent one is not an honest device's */
        victim = pick(a, NULL);
    }
    if (victim < a->n) {
        admit_entry *v = a->tab[victim];
        v->dropped = 1;
        shutdown(v->fd, SHUT_RDWR);
        if (cap > 0) {
            strncpy(dropped_addr, v->addr, cap - 1);
            dropped_addr[cap - 1] = '\0';
        }
        remove_at(a, victim);
    }
    e->seq = ++a->seq;
    e->spoke = 0;
    e->dropped = 0;
    e->in = 1;
    a->tab[a->n++] = e;
    pthread_mutex_unlock(&a->lock);
}

void admit_spoke(admit *a, admit_entry *e)
{
    pthread_mutex_lock(&a->lock);
    e->spoke = 1;
    pthread_mutex_unlock(&a->lock);
}

int admit_leave(admit *a, admit_entry *e)
{
    pthread_mutex_lock(&a->lock);
    for (unsigned i = 0; e->in && i < a->n; i++)
        if (a->tab[i] == e) {
            remove_at(a, i);
            break;
        }
    const int dropped = e->dropped;
    pthread_mutex_unlock(&a->lock);
    return dropped;
}

void admit_drop_all(admit *a)
{
    pthread_mutex_lock(&a->lock);
    while (a->n > 0) {
        a->tab[a->n - 1]->dropped = 1;
        shutdown(a->tab[a->n - 1]->fd, SHUT_RDWR);
        remove_at(a, a->n - 1);
    }
    pthread_mutex_unlock(&a->lock);
}

unsigned admit_count(admit *a)
{
    pthread_mutex_lock(&a->lock);
    const unsigned n = a->n;
    pthread_mutex_unlock(&a->lock);
    return n;
}
