/* Metrics registry: the Prometheus text and the JSON rendering of every type. */
#include <ingest.h>
#include <ingest/metrics.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

static void test_render_text_and_json(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    assert_non_null(ctx);
    ingest_metrics *m = NULL;
    assert_int_equal(ingest_metrics_create(ctx, &m), 0);
    ingest_metric *c = NULL, *g = NULL, *sec = NULL, *h = NULL;
    const double b[] = { 0.5, 2 };
    assert_int_equal(ingest_metric_define(m, INGEST_METRIC_COUNTER, "t_files_total", "files", "device", NULL, 0, &c), 0);
    assert_int_equal(ingest_metric_define(m, INGEST_METRIC_GAUGE, "t_queue", "queue", NULL, NULL, 0, &g), 0);
    assert_int_equal(ingest_metric_define(m, INGEST_METRIC_SECONDS, "t_stage_seconds_total", "stage", "stage", NULL, 0,
                                          &sec),
                     0);
    assert_int_equal(ingest_metric_define(m, INGEST_METRIC_HISTOGRAM, "t_lat_seconds", "lat", NULL, b, 2, &h), 0);
    /* a SECONDS metric with buckets, or a type out of range, is refused */
    ingest_metric *bad = NULL;
    assert_int_equal(ingest_metric_define(m, INGEST_METRIC_SECONDS, "t_bad", "x", NULL, b, 2, &bad), INGEST_EINVAL);
    assert_int_equal(ingest_metric_define(m, 5, "t_bad2", "x", NULL, NULL, 0, &bad), INGEST_EINVAL);

    ingest_metric_add(c, "dev\"1", 3);
    ingest_metric_add(c, "dev2", 4);
    ingest_metric_set(g, NULL, -2);
    ingest_metric_add_seconds(sec, "send", 1.25);
    ingest_metric_add_seconds(sec, "send", 0.25);
    ingest_metric_add_seconds(sec, "send", -1); /* ignored */
    ingest_metric_observe(h, NULL, 0.1);
    ingest_metric_observe(h, NULL, 1);
    ingest_metric_observe(h, NULL, 9);

    char text[4096];
    assert_true(ingest_metrics_render(m, text, sizeof(text)) < sizeof(text));
    assert_non_null(strstr(text, "# TYPE t_stage_seconds_total counter\nt_stage_seconds_total{stage=\"send\"} 1.500000\n"));
    assert_non_null(strstr(text, "t_files_total{device=\"dev\\\"1\"} 3\n"));
    assert_non_null(strstr(text, "t_lat_seconds_bucket{le=\"+Inf\"} 3\n"));

    char js[4096];
    const size_t need = ingest_metrics_render_json(m, js, sizeof(js));
    assert_true(need < sizeof(js));
    assert_int_equal(need, strlen(js));
    assert_string_equal(js, "{\"t_files_total\":{\"dev\\\"1\":3,\"dev2\":4},\"t_queue\":-2,"
                            "\"t_stage_seconds_total\":{\"send\":1.500000},"
                            "\"t_lat_seconds\":{\"buckets\":{\"0.5\":1,\"2\":2,\"+Inf\":3},\"sum\":10.100000,"
                            "\"count\":3}}");
    /* too small a buffer: truncated, NUL-terminated, and the length needed is returned */
    char small[16];
    assert_int_equal(ingest_metrics_render_json(m, small, sizeof(small)), need);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    ingest_metrics_destroy(m);
    ingest_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_text_and_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
