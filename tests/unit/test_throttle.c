/* The wire-rate throttle: token bucket and daily window, on a simulated clock. */
#include <ingest.h>
#include <ingest/throttle.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define SEC 1000000000LL

/* Send `total` bytes in pieces of `piece` as fast as the throttle allows; return simulated seconds. */
static double simulate(ingest_throttle *t, uint64_t total, uint64_t piece)
{
    int64_t now = SEC; /* a monotonic clock that does not start at 0 */
    uint64_t sent = 0;
    int guard = 0;
    while (sent < total && guard++ < 1000000) {
        const int64_t wait = ingest_throttle_delay(t, piece, now, 600);
        if (wait == 0)
            sent += piece;
        else
            now += wait * 1000000;
    }
    assert_true(sent >= total);
    return (double)(now - SEC) / (double)SEC;
}

static void test_rate_holds(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_throttle *t = NULL;
    assert_int_equal(ingest_throttle_create(ctx, 1000000, NULL, &t), 0);
    /* 10 MB at 1 MB/s with a 1 s burst: about 9 s. */
    const double secs = simulate(t, 10000000, 65536);
    assert_true(secs > 8.5 && secs < 9.6);
    ingest_throttle_destroy(t);
    /* Pieces larger than the burst still hold the long-run rate. */
    assert_int_equal(ingest_throttle_create(ctx, 100000, NULL, &t), 0);
    const double secs2 = simulate(t, 1000000, 250000);
    assert_true(secs2 > 7.0 && secs2 < 11.0);
    ingest_throttle_destroy(t);
    ingest_ctx_destroy(ctx);
}

static void test_unlimited(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_throttle *t = NULL;
    assert_int_equal(ingest_throttle_create(ctx, 0, "", &t), 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(ingest_throttle_delay(t, 1 << 20, SEC, 0), 0);
    ingest_throttle_destroy(t);
    ingest_ctx_destroy(ctx);
}

static void test_window(void **state)
{
    (void)state;
    int s = 0, e = 0;
    assert_int_equal(ingest_throttle_parse_window("22:00-06:00", &s, &e), 0);
    assert_int_equal(s, 1320);
    assert_int_equal(e, 360);
    assert_int_equal(ingest_throttle_parse_window("24:00-06:00", &s, &e), INGEST_EINVAL);
    assert_int_equal(ingest_throttle_parse_window("22:00-22:00", &s, &e), INGEST_EINVAL);
    assert_int_equal(ingest_throttle_parse_window("2200-0600", &s, &e), INGEST_EINVAL);
    assert_int_equal(ingest_throttle_parse_window("22:00-06:00x", &s, &e), INGEST_EINVAL);
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_throttle *t = NULL;
    assert_int_equal(ingest_throttle_create(ctx, 0, "nonsense", &t), INGEST_EINVAL);
    assert_null(t);
    assert_int_equal(ingest_throttle_create(ctx, 0, "22:00-06:00", &t), 0);
    assert_int_equal(ingest_throttle_delay(t, 100, SEC, 23 * 60), 0);  /* inside, before midnight */
    assert_int_equal(ingest_throttle_delay(t, 100, SEC, 3 * 60), 0);   /* inside, after midnight */
    assert_int_equal(ingest_throttle_delay(t, 100, SEC, 6 * 60), 16 * 60 * 60000LL); /* closes at 06:00 */
    assert_int_equal(ingest_throttle_delay(t, 100, SEC, 21 * 60 + 59), 60000);      /* opens in a minute */
    ingest_throttle_destroy(t);
    assert_int_equal(ingest_throttle_create(ctx, 0, "08:30-17:00", &t), 0);
    assert_int_equal(ingest_throttle_delay(t, 1, SEC, 8 * 60 + 29), 60000);
    assert_int_equal(ingest_throttle_delay(t, 1, SEC, 8 * 60 + 30), 0);
    assert_int_equal(ingest_throttle_delay(t, 1, SEC, 17 * 60), (1440 - 17 * 60 + 8 * 60 + 30) * 60000LL);
    ingest_throttle_destroy(t);
    ingest_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rate_holds),
        cmocka_unit_test(test_unlimited),
        cmocka_unit_test(test_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
