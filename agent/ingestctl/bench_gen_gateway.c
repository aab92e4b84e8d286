/*
 * `ingestctl bench gen --profile gateway|small`: trees shaped like a field
 * gateway's (issue 16), and their next generations.
 *
 * gateway, at 1 GiB (counts scale with --size, at least one of each):
 *
 *   events/SITE/DATE/HH/evt-NNNNNNN.json   36,500 JSON events, ~2.9 KB (1.3-4.5 KB),
 *                                           100 per folder, 4 sites
 *   exports/LINE/MONTH/prod-DATE-SHIFT.csv  2,000 production exports, ~26 KB
 *   telemetry/SITE/ASSET/...csv             530 wide CSV files at 1 s, ~0.5 MB
 *   frames/SENSOR/DATE/SENSOR-NNNNN.i16     170 int16 frames, ~1.6 MB: a 64-byte
 *                                           header, then slowly varying channels
 *   images/CAM/DATE/img-NNNNN.jpg           240 JPEG-like incompressible images, ~1.1 MB
 *   logs/{gateway,modbus,uplink}.log        3 logs of ~36 MB
 *
 * About 1.07e9 bytes and 39,443 files.  The events are what a fleet of
 * mixed devices sends: three encodings (an envelope with a readings array,
 * SenML, flat metrics), a fifth of the devices pretty-printing, six event
 * types with their own fields, 24 sensor kinds with their units and ranges,
 * UUIDs, ISO timestamps; each device keeps its encoding, model and
 * firmware.
 *
 * small: NFILES JSON events of ~900 bytes (400-1,400), 500 per folder, the
 * same generator.
 *
 * Every file has its own stream, seeded from (seed, kind, index,
 * generation), so a file's bytes do not depend on what was made before it
 * and --evolve can name and rewrite any of them.  Text is built with the
 * bgen_text appenders (no printf per value); frames use rotating phasors
 * (no sin() per sample); binary bytes come 8 at a time from the generator.
 */
#include "ingestctl.h"
#include "bench_gen.h"

#include <assert.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define T0_MS 1790000000000ull /* 2026-09-21T13:33:20Z, fixed so dates are reproducible */
#define HOUR_MS 3600000ull
#define DAY_MS 86400000ull

enum { K_EVENT = 1, K_EXPORT, K_TELEMETRY, K_FRAME, K_IMAGE, K_LOG, K_EDIT, K_DEVICE };

static bgen_text TX;

static const char *const SITES[] = { "lyon-north", "gdansk-2", "monterrey", "osaka-bay" };
#define NSITES 4u
#define DEVICES_PER_SITE 24u

/* ---- devices ------------------------------------------------------------ */

static const char *const KINDS[] = { "plc", "vfd", "env", "vib", "meter", "flow", "pump", "gps" };
static const struct {
    const char *vendor, *model;
} MODELS[] = {
    { "siemens", "S7-1500" },    { "beckhoff", "CX5140" }, { "moxa", "UC-8220" },    { "advantech", "ECU-1251" },
    { "rockwell", "1769-L33ER" }, { "schneider", "M262" }, { "wago", "PFC200" },     { "bosch", "XDK110" },
    { "abb", "ACS580" },          { "endress", "Promag-W" }, { "teltonika", "RUT955" }, { "sick", "MPB10" },
};
#define NMODELS (sizeof(MODELS) / sizeof(MODELS[0]))

typedef struct {
    unsigned site, index, kind, model, style, pretty, fw[3], sensor0, step;
    uint64_t mac;
} device;

/* A device's fixed traits, from (seed, site, index) alone. */
static void device_of(uint64_t seed, unsigned site, unsigned index, device *d)
{
    bgen_rng r = { bgen_seed(seed, K_DEVICE, site * 64u + index, 0) };
    d->site = site;
    d->index = index;
    d->kind = (unsigned)bgen_below(&r, 8);
    d->model = (unsigned)bgen_below(&r, NMODELS);
    const unsigned s = (unsigned)bgen_below(&r, 10);
    d->style = s < 5 ? 0 : s < 8 ? 1 : 2; /* envelope, SenML, flat */
    d->pretty = bgen_below(&r, 5) == 0;
    d->fw[0] = 1 + (unsigned)bgen_below(&r, 4);
    d->fw[1] = (unsigned)bgen_below(&r, 12);
    d->fw[2] = (unsigned)bgen_below(&r, 30);
    d->sensor0 = (unsigned)bgen_below(&r, 24);
    d->step = (const unsigned[]){ 1, 5, 7, 11, 13, 17, 19, 23 }[bgen_below(&r, 8)]; /* coprime to 24 sensors */
    d->mac = bgen_next(&r) & 0xffffffffffffull;
}

static void device_name(bgen_text *t, const device *d)
{
    bgen_str(t, KINDS[d->kind]);
    bgen_ch(t, '-');
    bgen_mem(t, SITES[d->site], 3);
    bgen_ch(t, '-');
    bgen_pad(t, d->index + 1, 2);
}

/* ---- a JSON writer on bgen_text: commas, and indentation when pretty ---- */

typedef struct {
    bgen_text *t;
    int pretty;
    int depth;
    unsigned char first[16];
} jw;

static void jw_indent(jw *j)
{
    static const char sp[] = "                                ";
    bgen_ch(j->t, '\n');
    bgen_mem(j->t, sp, (size_t)(2 * j->depth) < sizeof(sp) - 1 ? (size_t)(2 * j->depth) : sizeof(sp) - 1);
}

/* Before a member or an element: the comma, the newline, the key. */
static void jw_key(jw *j, const char *k)
{
    if (!j->first[j->depth])
        bgen_ch(j->t, ',');
    j->first[j->depth] = 0;
    if (j->pretty && j->depth > 0)
        jw_indent(j);
    if (k) {
        bgen_ch(j->t, '"');
        bgen_str(j->t, k);
        bgen_str(j->t, j->pretty ? "\": " : "\":");
    }
}

static void jw_open(jw *j, const char *k, char c)
{
    jw_key(j, k);
    bgen_ch(j->t, c);
    if (j->depth < 15)
        j->depth++;
    j->first[j->depth] = 1;
}

static void jw_close(jw *j, char c)
{
    const int empty = j->first[j->depth];
    if (j->depth > 0)
        j->depth--;
    if (j->pretty && !empty)
        jw_indent(j);
    bgen_ch(j->t, c);
}

static void jw_str(jw *j, const char *k, const char *v)
{
    jw_key(j, k);
    bgen_ch(j->t, '"');
    bgen_str(j->t, v);
    bgen_ch(j->t, '"');
}

/* "k":" then the caller appends the value, then jw_endq. */
static void jw_q(jw *j, const char *k)
{
    jw_key(j, k);
    bgen_ch(j->t, '"');
}
static void jw_endq(jw *j) { bgen_ch(j->t, '"'); }

static void jw_int(jw *j, const char *k, int64_t v)
{
    jw_key(j, k);
    bgen_i64(j->t, v);
}

static void jw_fix(jw *j, const char *k, int64_t v, unsigned dec)
{
    jw_key(j, k);
    bgen_fix(j->t, v, dec);
}

static void jw_raw(jw *j, const char *k, const char *v)
{
    jw_key(j, k);
    bgen_str(j->t, v);
}

static void jw_iso(jw *j, const char *k, uint64_t ms)
{
    jw_q(j, k);
    bgen_iso(j->t, ms, 1);
    jw_endq(j);
}

/* ---- sensor events ------------------------------------------------------ */

static const struct {
    const char *name, *unit, *senml;
    int64_t base, spread;
    unsigned dec;
} SENSORS[] = {
    { "temp_bearing", "degC", "Cel", 5500, 1500, 2 },    { "temp_ambient", "degC", "Cel", 220, 80, 1 },
    { "temp_oil", "degC", "Cel", 6200, 900, 2 },         { "humidity", "pct", "%RH", 450, 250, 1 },
    { "pressure_in", "bar", "bar", 6200, 1500, 3 },      { "pressure_out", "bar", "bar", 5100, 1200, 3 },
    { "flow", "m3/h", "m3/h", 12000, 4000, 2 },          { "vibration_rms", "mm/s", "mm/s", 2100, 1900, 3 },
    { "vibration_peak", "g", "g", 800, 700, 3 },         { "current_l1", "A", "A", 3200, 1000, 2 },
    { "current_l2", "A", "A", 3150, 1000, 2 },           { "current_l3", "A", "A", 3180, 1000, 2 },
    { "voltage_l1", "V", "V", 2300, 60, 1 },             { "power_active", "kW", "kW", 1800, 900, 2 },
    { "power_factor", "", "/", 920, 70, 3 },             { "speed", "rpm", "1/min", 1480, 40, 0 },
    { "torque", "Nm", "N.m", 850, 300, 1 },              { "level", "pct", "%", 600, 350, 1 },
    { "ph", "pH", "pH", 700, 80, 2 },                    { "conductivity", "uS/cm", "uS/cm", 420, 80, 0 },
    { "co2", "ppm", "ppm", 600, 400, 0 },                { "pm25", "ug/m3", "ug/m3", 120, 100, 1 },
    { "noise", "dBA", "dB", 720, 120, 1 },               { "energy_total", "kWh", "kWh", 1840000000, 20000000, 1 },
};
#define NSENSORS (sizeof(SENSORS) / sizeof(SENSORS[0]))

static const char *const TYPES[] = { "telemetry", "status", "alarm", "production", "position", "maintenance" };
static const char *const ALARMS[] = {
    "bearing temperature above limit", "motor current imbalance", "pressure drop on inlet",
    "cabinet door open", "communication timeout with slave", "filter differential pressure high",
    "low oil level", "emergency stop pressed", "encoder signal lost", "supply voltage sag",
};
static const char *const SEVERITIES[] = { "info", "warning", "minor", "major", "critical" };
static const char *const ACTIONS[] = { "inspection", "lubrication", "filter_change", "calibration", "belt_tension",
                                       "firmware_update" };
static const char *const NOTES[] = {
    "no findings", "replaced worn seal", "cleaned sensor head, values back in range",
    "adjusted setpoint after operator report", "scheduled follow-up with vendor",
    "torque checked on all terminals",
};
static const char *const IFACES[] = { "eth0", "wwan0", "wlan0", "eth1" };
static const char *const REBOOTS[] = { "none", "watchdog", "power_loss", "update", "operator" };
static const char *const QUALITY[] = { "good", "uncertain", "bad" };

static unsigned pick_type(bgen_rng *r)
{
    const unsigned u = (unsigned)bgen_below(r, 100);
    return u < 55 ? 0 : u < 67 ? 1 : u < 77 ? 2 : u < 90 ? 3 : u < 94 ? 4 : 5;
}

static int64_t sensor_value(bgen_rng *r, unsigned s)
{
    return SENSORS[s].base + (int64_t)bgen_below(r, 2 * (uint64_t)SENSORS[s].spread + 1) - SENSORS[s].spread;
}

static void uuid(bgen_text *t, bgen_rng *r)
{
    const uint64_t a = bgen_next(r), b = bgen_next(r);
    bgen_hex(t, a >> 32, 8);
    bgen_ch(t, '-');
    bgen_hex(t, a >> 16, 4);
    bgen_ch(t, '-');
    bgen_hex(t, 0x4000 | (a & 0x0fff), 4);
    bgen_ch(t, '-');
    bgen_hex(t, 0x8000 | (b >> 48 & 0x3fff), 4);
    bgen_ch(t, '-');
    bgen_hex(t, b, 12);
}

/* The object of the event's type (envelope and flat encodings). */
static void type_fields(jw *j, bgen_rng *r, unsigned type, uint64_t ts)
{
    bgen_text *t = j->t;
    switch (type) {
    case 0:
        jw_open(j, "window", '{');
        jw_iso(j, "start", ts - 60000);
        jw_iso(j, "end", ts);
        jw_int(j, "samples", 60 + (int64_t)bgen_below(r, 540));
        jw_close(j, '}');
        break;
    case 1:
        jw_open(j, "health", '{');
        jw_int(j, "uptime_s", (int64_t)bgen_below(r, 40000000));
        jw_fix(j, "cpu_pct", (int64_t)bgen_below(r, 1000), 1);
        jw_int(j, "mem_used_kb", 40000 + (int64_t)bgen_below(r, 400000));
        jw_int(j, "mem_total_kb", 524288);
        jw_int(j, "disk_free_mb", (int64_t)bgen_below(r, 30000));
        jw_open(j, "load", '[');
        for (int i = 0; i < 3; i++)
            jw_fix(j, NULL, (int64_t)bgen_below(r, 400), 2);
        jw_close(j, ']');
        jw_open(j, "net", '{');
        jw_str(j, "iface", IFACES[bgen_below(r, 4)]);
        jw_int(j, "rssi_dbm", -40 - (int64_t)bgen_below(r, 60));
        jw_int(j, "rx_bytes", (int64_t)bgen_below(r, 9000000000ull));
        jw_int(j, "tx_bytes", (int64_t)bgen_below(r, 3000000000ull));
        jw_q(j, "ip");
        bgen_str(t, "10.");
        bgen_u64(t, bgen_below(r, 256));
        bgen_ch(t, '.');
        bgen_u64(t, bgen_below(r, 256));
        bgen_ch(t, '.');
        bgen_u64(t, 1 + bgen_below(r, 254));
        jw_endq(j);
        jw_close(j, '}');
        jw_str(j, "reboot_reason", REBOOTS[bgen_below(r, 5)]);
        jw_close(j, '}');
        break;
    case 2: {
        const unsigned a = (unsigned)bgen_below(r, 10);
        jw_open(j, "alarm", '{');
        jw_q(j, "code");
        bgen_ch(t, 'E');
        bgen_pad(t, 1000 + a * 37 + bgen_below(r, 3), 4);
        jw_endq(j);
        jw_str(j, "severity", SEVERITIES[bgen_below(r, 5)]);
        jw_str(j, "message", ALARMS[a]);
        const int active = bgen_below(r, 3) != 0;
        jw_raw(j, "active", active ? "true" : "false");
        if (active) {
            jw_raw(j, "acked_by", "null");
        } else {
            jw_q(j, "acked_by");
            bgen_str(t, "op-");
            bgen_pad(t, bgen_below(r, 200), 3);
            jw_endq(j);
        }
        jw_iso(j, "raised_at", ts - bgen_below(r, 3600000));
        jw_int(j, "count", 1 + (int64_t)bgen_below(r, 40));
        jw_close(j, '}');
        break;
    }
    case 3:
        jw_open(j, "production", '{');
        jw_q(j, "order");
        bgen_str(t, "PO-2026-");
        bgen_pad(t, bgen_below(r, 1000000), 6);
        jw_endq(j);
        jw_q(j, "batch");
        bgen_ch(t, 'B');
        bgen_pad(t, bgen_below(r, 100000), 5);
        jw_endq(j);
        jw_q(j, "product");
        bgen_str(t, "SKU-");
        bgen_pad(t, 10000 + bgen_below(r, 900), 5);
        jw_endq(j);
        jw_int(j, "good", (int64_t)bgen_below(r, 5000));
        jw_int(j, "scrap", (int64_t)bgen_below(r, 60));
        jw_int(j, "cycle_ms", 800 + (int64_t)bgen_below(r, 4000));
        jw_str(j, "shift", (const char *[]){ "A", "B", "C" }[bgen_below(r, 3)]);
        jw_close(j, '}');
        break;
    case 4:
        jw_open(j, "position", '{');
        jw_fix(j, "lat", 45000000 + (int64_t)bgen_below(r, 2000000), 6);
        jw_fix(j, "lon", 4500000 + (int64_t)bgen_below(r, 2000000), 6);
        jw_fix(j, "alt_m", 1500 + (int64_t)bgen_below(r, 3000), 1);
        jw_fix(j, "speed_kmh", (int64_t)bgen_below(r, 900), 1);
        jw_int(j, "heading_deg", (int64_t)bgen_below(r, 360));
        jw_fix(j, "hdop", 6 + (int64_t)bgen_below(r, 30), 1);
        jw_int(j, "sats", 4 + (int64_t)bgen_below(r, 12));
        jw_close(j, '}');
        break;
    default:
        jw_open(j, "maintenance", '{');
        jw_q(j, "work_order");
        bgen_str(t, "WO-");
        bgen_pad(t, bgen_below(r, 100000), 5);
        jw_endq(j);
        jw_str(j, "action", ACTIONS[bgen_below(r, 6)]);
        jw_q(j, "technician");
        bgen_str(t, "tech-");
        bgen_pad(t, bgen_below(r, 40), 2);
        jw_endq(j);
        jw_int(j, "duration_min", 5 + (int64_t)bgen_below(r, 240));
        jw_str(j, "notes", NOTES[bgen_below(r, 6)]);
        jw_iso(j, "next_due", ts + (30 + bgen_below(r, 150)) * DAY_MS);
        jw_close(j, '}');
        break;
    }
}

static void firmware(bgen_text *t, const device *d)
{
    bgen_u64(t, d->fw[0]);
    bgen_ch(t, '.');
    bgen_u64(t, d->fw[1]);
    bgen_ch(t, '.');
    bgen_u64(t, d->fw[2]);
}

/* SenML (RFC 8428): a base record, then one record per reading. */
static void event_senml(jw *j, bgen_rng *r, const device *d, unsigned type, uint64_t ts, size_t target)
{
    bgen_text *t = j->t;
    jw_open(j, NULL, '[');
    jw_open(j, NULL, '{');
    jw_q(j, "bn");
    bgen_str(t, "urn:dev:mac:");
    bgen_hex(t, d->mac, 12);
    bgen_ch(t, ':');
    jw_endq(j);
    jw_fix(j, "bt", (int64_t)ts, 3);
    jw_int(j, "bver", 10);
    jw_close(j, '}');
    if (type == 2) {
        jw_open(j, NULL, '{');
        jw_str(j, "n", "alarm");
        jw_str(j, "vs", ALARMS[bgen_below(r, 10)]);
        jw_close(j, '}');
    }
    for (unsigned k = 0; t->len + 24 < target && k < 400; k++) {
        const unsigned s = (d->sensor0 + k * d->step) % NSENSORS;
        jw_open(j, NULL, '{');
        jw_q(j, "n");
        bgen_str(t, SENSORS[s].name);
        bgen_ch(t, '_');
        bgen_u64(t, 1 + k / NSENSORS);
        jw_endq(j);
        jw_str(j, "u", SENSORS[s].senml);
        jw_fix(j, "v", sensor_value(r, s), SENSORS[s].dec);
        if (k % 3 == 2)
            jw_fix(j, "t", -(int64_t)bgen_below(r, 60000), 3);
        jw_close(j, '}');
    }
    jw_close(j, ']');
}

/* Flat: a few header keys, the type's object, the metrics as keys. */
static void event_flat(jw *j, bgen_rng *r, const device *d, unsigned type, uint64_t seq, uint64_t ts,
                       size_t target)
{
    bgen_text *t = j->t;
    jw_open(j, NULL, '{');
    jw_int(j, "ts", (int64_t)ts);
    jw_q(j, "dev");
    device_name(t, d);
    jw_endq(j);
    jw_str(j, "site", SITES[d->site]);
    jw_str(j, "type", TYPES[type]);
    jw_int(j, "seq", (int64_t)seq);
    jw_q(j, "fw");
    firmware(t, d);
    jw_endq(j);
    if (type != 0)
        type_fields(j, r, type, ts);
    jw_open(j, "metrics", '{');
    for (unsigned k = 0; t->len + 24 < target && k < 400; k++) {
        const unsigned s = (d->sensor0 + k * d->step) % NSENSORS;
        jw_key(j, NULL);
        bgen_ch(t, '"');
        bgen_str(t, SENSORS[s].name);
        bgen_ch(t, '_');
        bgen_u64(t, 1 + k / NSENSORS);
        bgen_str(t, j->pretty ? "\": " : "\":");
        bgen_fix(t, sensor_value(r, s), SENSORS[s].dec);
    }
    jw_close(j, '}');
    jw_close(j, '}');
}

/* An envelope (id, schema, times, source), the type's object, a readings array, tags. */
static void event_envelope(jw *j, bgen_rng *r, const device *d, unsigned type, uint64_t seq, uint64_t ts,
                           size_t target)
{
    bgen_text *t = j->t;
    jw_open(j, NULL, '{');
    jw_q(j, "event_id");
    uuid(t, r);
    jw_endq(j);
    jw_q(j, "schema");
    bgen_str(t, "com.fleet.");
    bgen_str(t, TYPES[type]);
    bgen_str(t, "/v");
    bgen_u64(t, 1 + d->fw[0] % 3);
    jw_endq(j);
    jw_iso(j, "ts", ts);
    jw_iso(j, "received_at", ts + 40 + bgen_below(r, 2000));
    jw_open(j, "source", '{');
    jw_q(j, "device");
    device_name(t, d);
    jw_endq(j);
    jw_str(j, "vendor", MODELS[d->model].vendor);
    jw_str(j, "model", MODELS[d->model].model);
    jw_q(j, "firmware");
    firmware(t, d);
    jw_endq(j);
    jw_str(j, "site", SITES[d->site]);
    jw_q(j, "zone");
    bgen_str(t, "hall-");
    bgen_ch(t, (char)('a' + d->index % 5));
    jw_endq(j);
    jw_close(j, '}');
    jw_int(j, "seq", (int64_t)seq);
    jw_str(j, "type", TYPES[type]);
    type_fields(j, r, type, ts);
    jw_open(j, "readings", '[');
    for (unsigned k = 0; t->len + 40 < target && k < 400; k++) {
        const unsigned s = (d->sensor0 + k * d->step) % NSENSORS;
        const int64_t v = sensor_value(r, s);
        const unsigned q = (unsigned)bgen_below(r, 100);
        jw_open(j, NULL, '{');
        jw_str(j, "sensor", SENSORS[s].name);
        jw_int(j, "channel", 1 + k / NSENSORS);
        jw_fix(j, "value", v, SENSORS[s].dec);
        if (SENSORS[s].unit[0])
            jw_str(j, "unit", SENSORS[s].unit);
        jw_str(j, "quality", QUALITY[q < 94 ? 0 : q < 98 ? 1 : 2]);
        if (k % 4 == 1) {
            const int64_t w = (int64_t)bgen_below(r, (uint64_t)SENSORS[s].spread / 4 + 1);
            jw_fix(j, "min", v - w, SENSORS[s].dec);
            jw_fix(j, "max", v + w + (int64_t)bgen_below(r, 10), SENSORS[s].dec);
        }
        jw_close(j, '}');
    }
    jw_close(j, ']');
    jw_open(j, "tags", '[');
    jw_q(j, NULL);
    bgen_str(t, "line-");
    bgen_u64(t, 1 + d->index % 6);
    jw_endq(j);
    jw_str(j, NULL, d->index % 4 ? "prod" : "pilot");
    jw_close(j, ']');
    jw_close(j, '}');
}

/*
 * One event of about target bytes (readings are added until it is reached)
 * into t, from device d at ts, in the device's encoding; one line.
 */
static void event_json(bgen_text *t, bgen_rng *r, const device *d, uint64_t seq, uint64_t ts, size_t target)
{
    jw j = { .t = t, .pretty = d->pretty, .depth = 0, .first = { 1 } };
    const unsigned type = pick_type(r);
    bgen_reset(t);
    if (d->style == 1)
        event_senml(&j, r, d, type, ts, target);
    else if (d->style == 2)
        event_flat(&j, r, d, type, seq, ts, target);
    else
        event_envelope(&j, r, d, type, seq, ts, target);
    bgen_ch(t, '\n');
}

/* Directory and name of event i, per_folder events per folder. */
static void event_path(char *dir, size_t dn, char *name, size_t nn, const char *root, uint64_t i, unsigned per_folder)
{
    const uint64_t f = i / per_folder, hour_ms = T0_MS + f / NSITES * HOUR_MS;
    bgen_text *t = &TX;
    bgen_reset(t);
    bgen_date(t, hour_ms / DAY_MS);
    bgen_ch(t, '\0');
    snprintf(dir, dn, "%s/events/%s/%.10s/%02u", root, SITES[f % NSITES], t->buf, (unsigned)(hour_ms % DAY_MS / HOUR_MS));
    snprintf(name, nn, "evt-%07llu.json", (unsigned long long)i);
}

/* Event file i of generation gen (gen > 0: a rewrite), about mean bytes. */
static int gen_event(const char *root, uint64_t seed, uint64_t i, unsigned gen, unsigned per_folder, size_t mean)
{
    char dir[4096], name[64];
    bgen_rng r = { bgen_seed(seed, K_EVENT, i, gen) };
    event_path(dir, sizeof(dir), name, sizeof(name), root, i, per_folder);
    const uint64_t f = i / per_folder;
    const uint64_t ts = T0_MS + f / NSITES * HOUR_MS + (i % per_folder) * (HOUR_MS / per_folder) +
                        bgen_below(&r, HOUR_MS / per_folder) + gen * 600000ull;
    device d;
    device_of(seed, (unsigned)(f % NSITES), (unsigned)bgen_below(&r, DEVICES_PER_SITE), &d);
    const size_t target = mean * 4 / 9 + (size_t)bgen_below(&r, mean * 10 / 9 + 1);
    static bgen_text ev;
    event_json(&ev, &r, &d, i, ts, target);
    assert(ev.over == 0);
    if (bgen_open(dir, name, 0) != 0)
        return -1;
    bgen_put(ev.buf, ev.len);
    return bgen_close();
}

/* ---- CSV exports and telemetry ------------------------------------------ */

static const char *const STOPS[] = { "none", "changeover", "material_shortage", "jam", "maintenance",
                                     "quality_check", "operator_break", "upstream_blocked" };

/* Directory and name of export i: 12 lines, 3 shifts a day, a folder per line and month. */
static void export_path(char *dir, size_t dn, char *name, size_t nn, const char *root, uint64_t i)
{
    bgen_text *t = &TX;
    bgen_reset(t);
    bgen_date(t, T0_MS / DAY_MS + i / 36);
    snprintf(dir, dn, "%s/exports/L%02u/%.7s", root, (unsigned)(i % 12) + 1, t->buf);
    snprintf(name, nn, "prod-%.10s-%c.csv", t->buf, "ABC"[i / 12 % 3]);
}

static int gen_export(const char *root, uint64_t seed, uint64_t i)
{
    char dir[4096], name[96];
    bgen_rng r = { bgen_seed(seed, K_EXPORT, i, 0) };
    const unsigned line = (unsigned)(i % 12), shift = (unsigned)(i / 12 % 3);
    const uint64_t day = T0_MS / DAY_MS + i / 36;
    bgen_text *t = &TX;
    export_path(dir, sizeof(dir), name, sizeof(name), root, i);
    if (bgen_open(dir, name, 0) != 0)
        return -1;
    static const char head[] = "date,shift,line,station,product,order,units_planned,units_good,units_scrap,"
                               "oee_pct,availability_pct,performance_pct,quality_pct,downtime_min,stop_reason,operator\n";
    bgen_put(head, sizeof(head) - 1);
    const uint64_t target = 16000 + bgen_below(&r, 20001);
    const uint64_t order = bgen_below(&r, 900000);
    for (uint64_t written = sizeof(head) - 1, k = 0; written < target; k++) {
        bgen_reset(t);
        bgen_date(t, day);
        bgen_ch(t, ',');
        bgen_ch(t, "ABC"[shift]);
        bgen_str(t, ",L");
        bgen_pad(t, line + 1, 2);
        bgen_str(t, ",ST-");
        bgen_pad(t, 1 + k % 24, 2);
        bgen_str(t, ",SKU-");
        bgen_pad(t, 10000 + bgen_below(&r, 900), 5);
        bgen_str(t, ",PO-2026-");
        bgen_pad(t, order + k / 8, 6);
        const uint64_t planned = 300 + bgen_below(&r, 400), good = planned - bgen_below(&r, 80),
                       scrap = bgen_below(&r, 20);
        const int64_t av = 800 + (int64_t)bgen_below(&r, 200), pf = 780 + (int64_t)bgen_below(&r, 220),
                      q = 900 + (int64_t)bgen_below(&r, 100);
        bgen_ch(t, ',');
        bgen_u64(t, planned);
        bgen_ch(t, ',');
        bgen_u64(t, good);
        bgen_ch(t, ',');
        bgen_u64(t, scrap);
        bgen_ch(t, ',');
        bgen_fix(t, av * pf / 1000 * q / 1000, 1);
        bgen_ch(t, ',');
        bgen_fix(t, av, 1);
        bgen_ch(t, ',');
        bgen_fix(t, pf, 1);
        bgen_ch(t, ',');
        bgen_fix(t, q, 1);
        bgen_ch(t, ',');
        bgen_u64(t, bgen_below(&r, 90));
        bgen_ch(t, ',');
        bgen_str(t, STOPS[bgen_below(&r, 8)]);
        bgen_str(t, ",op-");
        bgen_pad(t, bgen_below(&r, 200), 3);
        bgen_ch(t, '\n');
        bgen_put(t->buf, t->len);
        written += t->len;
    }
    return bgen_close();
}

static const char *const ASSETS[] = { "ahu-01", "ahu-02", "chiller-01", "pump-03", "pump-04", "comp-01",
                                      "comp-02", "boiler-01", "press-07", "oven-02", "conveyor-11", "kiln-01" };

/* Columns after the timestamp and asset: value, step, decimals, low, high. */
static const struct {
    const char *name;
    int32_t start, step;
    unsigned dec;
    int32_t lo, hi;
} COLS[] = {
    { "supply_temp_c", 1800, 4, 2, 500, 9000 },   { "return_temp_c", 2400, 4, 2, 500, 9000 },
    { "pressure_bar", 4200, 6, 3, 0, 16000 },     { "flow_m3h", 8500, 20, 2, 0, 40000 },
    { "power_kw", 3100, 15, 2, 0, 90000 },        { "speed_rpm", 1450, 3, 0, 0, 3600 },
    { "vibration_mm_s", 1800, 9, 3, 0, 25000 },   { "valve_pct", 500, 2, 1, 0, 1000 },
};
#define NCOLS (sizeof(COLS) / sizeof(COLS[0]))

static int gen_telemetry(const char *root, uint64_t seed, uint64_t i)
{
    char dir[4096], name[96];
    bgen_rng r = { bgen_seed(seed, K_TELEMETRY, i, 0) };
    const char *asset = ASSETS[i / NSITES % 12];
    const uint64_t t0 = T0_MS + i / 48 * DAY_MS + bgen_below(&r, 4) * 6 * HOUR_MS;
    snprintf(dir, sizeof(dir), "%s/telemetry/%s/%s", root, SITES[i % NSITES], asset);
    bgen_text *t = &TX;
    bgen_reset(t);
    bgen_iso(t, t0, 0);
    snprintf(name, sizeof(name), "%s_%.13s_%04llu.csv", asset, t->buf, (unsigned long long)i);
    if (bgen_open(dir, name, 0) != 0)
        return -1;
    bgen_reset(t);
    bgen_str(t, "timestamp,asset");
    int32_t v[NCOLS];
    for (size_t c = 0; c < NCOLS; c++) {
        bgen_ch(t, ',');
        bgen_str(t, COLS[c].name);
        v[c] = COLS[c].start + (int32_t)bgen_below(&r, (uint64_t)COLS[c].start / 4 + 1);
    }
    bgen_str(t, ",alarm\n");
    bgen_put(t->buf, t->len);
    const uint64_t target = 256000 + bgen_below(&r, 488001);
    uint64_t written = t->len, ts = t0;
    while (written < target) {
        bgen_reset(t);
        bgen_iso(t, ts, 0);
        bgen_ch(t, ',');
        bgen_str(t, asset);
        uint64_t steps = bgen_next(&r);
        for (size_t c = 0; c < NCOLS; c++, steps >>= 8) {
            /* a random walk: -step..+step, 8 bits of the draw per column */
            v[c] += (int32_t)((int64_t)(steps & 0xff) * (2 * COLS[c].step + 1) / 256) - COLS[c].step;
            if (v[c] < COLS[c].lo) v[c] = COLS[c].lo;
            if (v[c] > COLS[c].hi) v[c] = COLS[c].hi;
            bgen_ch(t, ',');
            bgen_fix(t, v[c], COLS[c].dec);
        }
        bgen_str(t, bgen_below(&r, 400) ? ",0\n" : ",1\n");
        bgen_put(t->buf, t->len);
        written += t->len;
        ts += 1000;
    }
    return bgen_close();
}

/* ---- binary: int16 frames, JPEG-like images ----------------------------- */

#define FRAME_HEADER 64

/* Directory and name of frame i: its directory holds frames of one sensor and day. */
static void frame_path(char *dir, size_t dn, char *name, size_t nn, const char *root, uint64_t i)
{
    const unsigned sensor = (unsigned)(i % 6);
    const char *kind = sensor < 4 ? "vib" : "acoustic";
    const uint64_t t0 = T0_MS + i / 6 * 20 * 60000ull;
    bgen_text *t = &TX;
    bgen_reset(t);
    bgen_date(t, t0 / DAY_MS);
    bgen_ch(t, '\0');
    snprintf(dir, dn, "%s/frames/%s-%02u/%.10s", root, kind, sensor + 1, t->buf);
    snprintf(name, nn, "%s-%02u-%05llu.i16", kind, sensor + 1, (unsigned long long)i);
}

static int gen_frame16(const char *root, uint64_t seed, uint64_t i)
{
    char dir[4096], name[96];
    bgen_rng r = { bgen_seed(seed, K_FRAME, i, 0) };
    const unsigned sensor = (unsigned)(i % 6), channels = 1 + (unsigned)bgen_below(&r, 3);
    const uint64_t t0 = T0_MS + i / 6 * 20 * 60000ull;
    frame_path(dir, sizeof(dir), name, sizeof(name), root, i);
    uint64_t bytes = 1200000 + bgen_below(&r, 800001);
    bytes -= bytes % (2 * channels);
    const uint64_t samples = (bytes - FRAME_HEADER) / (2 * channels);
    /* header: magic, version, channels, rate, start (ms), samples per channel, device; little-endian */
    uint8_t h[FRAME_HEADER] = { 'I', '1', '6', 'F', 'R', 'A', 'M', 'E' };
    const uint32_t version = 2, rate = sensor < 4 ? 25600 : 48000;
    memcpy(h + 8, &version, 4);
    memcpy(h + 12, &channels, 4);
    memcpy(h + 16, &rate, 4);
    memcpy(h + 20, &t0, 8);
    memcpy(h + 28, &samples, 8);
    snprintf((char *)h + 36, 28, "gw01/%s-%02u", sensor < 4 ? "vib" : "acoustic", sensor + 1);
    if (bgen_open(dir, name, 0) != 0)
        return -1;
    bgen_put(h, sizeof(h));
    /* per channel: two rotating phasors (a tone and a slower swell) and a drift */
    double x[3][2], y[3][2], c[3][2], s[3][2], amp[3][2];
    int32_t drift[3];
    for (unsigned ch = 0; ch < channels; ch++) {
        for (int k = 0; k < 2; k++) {
            const double w = 2.0 * M_PI / (double)(k ? 20000 + bgen_below(&r, 200000) : 400 + bgen_below(&r, 20000));
            c[ch][k] = cos(w);
            s[ch][k] = sin(w);
            x[ch][k] = 1.0;
            y[ch][k] = 0.0;
            amp[ch][k] = k ? 1000.0 + (double)bgen_below(&r, 4000) : 2000.0 + (double)bgen_below(&r, 7000);
        }
        drift[ch] = (int32_t)bgen_below(&r, 2000) - 1000;
    }
    int16_t buf[2048];
    uint64_t noise = 0;
    unsigned nbits = 0;
    size_t n = 0;
    for (uint64_t k = 0; k < samples; k++) {
        for (unsigned ch = 0; ch < channels; ch++) {
            double v = 0;
            for (int o = 0; o < 2; o++) {
                const double nx = x[ch][o] * c[ch][o] - y[ch][o] * s[ch][o];
                y[ch][o] = x[ch][o] * s[ch][o] + y[ch][o] * c[ch][o];
                x[ch][o] = nx;
                v += amp[ch][o] * nx;
            }
            if (nbits < 5) {
                noise = bgen_next(&r);
                nbits = 64;
            }
            const int32_t e = (int32_t)(noise & 31) - 16;
            noise >>= 5;
            nbits -= 5;
            int32_t q = (int32_t)v + drift[ch] + e;
            q = q > 32767 ? 32767 : q < -32768 ? -32768 : q;
            buf[n++] = (int16_t)q;
            if (n == sizeof(buf) / sizeof(buf[0])) {
                bgen_put(buf, sizeof(buf));
                n = 0;
            }
        }
        if ((k & 4095) == 4095) { /* keep the phasors on the unit circle; let the drift wander */
            for (unsigned ch = 0; ch < channels; ch++) {
                for (int o = 0; o < 2; o++) {
                    const double m = 1.0 / sqrt(x[ch][o] * x[ch][o] + y[ch][o] * y[ch][o]);
                    x[ch][o] *= m;
                    y[ch][o] *= m;
                }
                drift[ch] += (int32_t)bgen_below(&r, 41) - 20;
            }
        }
    }
    bgen_put(buf, n * sizeof(buf[0]));
    return bgen_close();
}

static int gen_image(const char *root, uint64_t seed, uint64_t i)
{
    char dir[4096], name[96];
    bgen_rng r = { bgen_seed(seed, K_IMAGE, i, 0) };
    const unsigned cam = (unsigned)(i % 8);
    const uint64_t ts = T0_MS + i / 8 * 15 * 60000ull + bgen_below(&r, 60000);
    bgen_text *t = &TX;
    bgen_reset(t);
    bgen_date(t, ts / DAY_MS);
    bgen_ch(t, '\0');
    snprintf(dir, sizeof(dir), "%s/images/cam-%02u/%.10s", root, cam + 1, t->buf);
    snprintf(name, sizeof(name), "img-%05llu.jpg", (unsigned long long)i);
    if (bgen_open(dir, name, 0) != 0)
        return -1;
    static const uint8_t app0[] = { 0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0 };
    bgen_put(app0, sizeof(app0));
    bgen_reset(t);
    bgen_str(t, "Exif\0\0camera=gw01-cam-");
    bgen_pad(t, cam + 1, 2);
    bgen_str(t, " model=IPC-HFW2431 datetime=");
    bgen_iso(t, ts, 0);
    bgen_str(t, " exposure_us=");
    bgen_u64(t, 100 + bgen_below(&r, 20000));
    const uint8_t app1[4] = { 0xff, 0xe1, (uint8_t)((t->len + 2) >> 8), (uint8_t)(t->len + 2) };
    bgen_put(app1, sizeof(app1));
    bgen_put(t->buf, t->len);
    const uint64_t bytes = 700000 + bgen_below(&r, 800001);
    uint64_t buf[512];
    for (uint64_t written = sizeof(app0) + sizeof(app1) + t->len; written + 2 < bytes; written += sizeof(buf)) {
        for (size_t k = 0; k < 512; k++)
            buf[k] = bgen_next(&r);
        const size_t n = bytes - 2 - written < sizeof(buf) ? (size_t)(bytes - 2 - written) : sizeof(buf);
        bgen_put(buf, n);
    }
    static const uint8_t eoi[] = { 0xff, 0xd9 };
    bgen_put(eoi, sizeof(eoi));
    return bgen_close();
}

/* ---- logs ---------------------------------------------------------------- */

/* '#' in a message is a number below the template's bound. */
static const struct {
    const char *name;
    const char *comp[4];
    const char *msg[8];
    uint32_t bound[8];
} LOGS[] = {
    { "gateway.log",
      { "core", "store", "watch", "sched" },
      { "batch # committed files=# bytes=#", "rescan done dirs=# files=# in #ms", "disk usage #% of /data",
        "config reloaded generation=#", "watchdog kick latency_us=#", "queue depth=# oldest_s=#",
        "cert renewal check ok days_left=#", "ntp offset_ms=# stratum=#" },
      { 100000, 4000, 100, 500, 5000, 600, 90, 50 } },
    { "modbus.log",
      { "rtu0", "rtu1", "tcp", "poll" },
      { "poll slave=# fc=3 regs=# rtt_ms=#", "timeout slave=# retry=#", "crc error slave=# frame=#",
        "write slave=# reg=# value=#", "reconnect unit=# after #ms", "cycle # complete slaves=# errors=#",
        "exception slave=# code=#", "register map reloaded entries=#" },
      { 248, 125, 250, 248, 32, 1000, 248, 5000 } },
    { "uplink.log",
      { "mqtt", "http", "lte", "tls" },
      { "publish ok topic=site/#/evt qos=1 bytes=# rtt_ms=#", "reconnect attempt=# backoff_ms=#",
        "signal rssi=-# rsrp=-# sinr=#", "upload chunk=# of # bytes=#", "session resumed id=# age_s=#",
        "ack pending=# inflight=#", "dns lookup core.example.net took #ms", "throughput kbps=# window=#" },
      { 4, 20, 120, 5000, 100000, 64, 900, 20000 } },
};
static const char *const LOG_LEVELS[] = { "INFO ", "INFO ", "INFO ", "INFO ", "INFO ", "INFO ", "INFO ", "INFO ",
                                          "INFO ", "INFO ", "INFO ", "DEBUG", "DEBUG", "DEBUG", "WARN ", "ERROR" };

static int gen_log_file(const char *root, uint64_t seed, unsigned which, uint64_t bytes, uint64_t t, unsigned gen)
{
    char dir[4096];
    bgen_rng r = { bgen_seed(seed, K_LOG, which, gen) };
    snprintf(dir, sizeof(dir), "%s/logs", root);
    if (bgen_open(dir, LOGS[which].name, gen > 0) != 0)
        return -1;
    bgen_text *tx = &TX;
    for (uint64_t written = 0; written < bytes;) {
        const uint64_t u = bgen_next(&r);
        const unsigned m = (unsigned)(u & 7), lv = (unsigned)(u >> 3 & 15), comp = (unsigned)(u >> 7 & 3);
        bgen_reset(tx);
        bgen_iso(tx, t, 1);
        bgen_ch(tx, ' ');
        bgen_str(tx, LOG_LEVELS[lv]);
        bgen_str(tx, " [");
        bgen_str(tx, LOGS[which].comp[comp]);
        bgen_str(tx, "] ");
        for (const char *p = LOGS[which].msg[m];;) {
            const char *hash = strchr(p, '#');
            if (hash == NULL) {
                bgen_str(tx, p);
                break;
            }
            bgen_mem(tx, p, (size_t)(hash - p));
            bgen_u64(tx, bgen_below(&r, LOGS[which].bound[m]));
            p = hash + 1;
        }
        bgen_ch(tx, '\n');
        bgen_put(tx->buf, tx->len);
        written += tx->len;
        t += 5 + (u >> 9) % 200;
    }
    return bgen_close();
}

/* ---- the gateway tree ------------------------------------------------------ */

typedef struct {
    uint64_t events, exports, telemetry, frames, images, log_bytes;
} gw_plan;

/* n at 1 GiB, scaled to size, at least 1 */
static uint64_t scaled(uint64_t n, uint64_t size)
{
    const uint64_t v = (uint64_t)((double)n * (double)size / (double)(1ull << 30) + 0.5);
    return v ? v : 1;
}

static void plan_of(uint64_t size, gw_plan *p)
{
    p->events = scaled(36500, size);
    p->exports = scaled(2000, size);
    p->telemetry = scaled(530, size);
    p->frames = scaled(170, size);
    p->images = scaled(240, size);
    p->log_bytes = scaled(36000000, size);
    if (p->log_bytes < 4096)
        p->log_bytes = 4096;
}

/* targets; a file ends after the reading that reaches its target, ~20 bytes later on average */
#define EVENT_MEAN 2880 /* ~2.9 KB */
#define EVENTS_PER_FOLDER 100

static int gateway_generate(const char *root, uint64_t seed, const gw_plan *p, unsigned *files)
{
    for (uint64_t i = 0; i < p->events; i++, (*files)++)
        if (gen_event(root, seed, i, 0, EVENTS_PER_FOLDER, EVENT_MEAN) != 0)
            return -1;
    for (uint64_t i = 0; i < p->exports; i++, (*files)++)
        if (gen_export(root, seed, i) != 0)
            return -1;
    for (uint64_t i = 0; i < p->telemetry; i++, (*files)++)
        if (gen_telemetry(root, seed, i) != 0)
            return -1;
    for (uint64_t i = 0; i < p->frames; i++, (*files)++)
        if (gen_frame16(root, seed, i) != 0)
            return -1;
    for (uint64_t i = 0; i < p->images; i++, (*files)++)
        if (gen_image(root, seed, i) != 0)
            return -1;
    for (unsigned k = 0; k < 3; k++, (*files)++)
        if (gen_log_file(root, seed, k, p->log_bytes, T0_MS, 0) != 0)
            return -1;
    return 0;
}

/*
 * Generation gen, in place: ~1% appended to each log, ~1% new events (the
 * next indices, so they fill the last folder and open new ones), one
 * 16-byte edit in place in ~6% of the frames (at least one), one event
 * folder of 100 files renamed, 5 events and 1 export deleted.
 */
static int gateway_evolve(const char *root, uint64_t seed, const gw_plan *p, unsigned gen, unsigned *changed)
{
    char dir[4096], name[64], from[4200], to[4200];
    for (unsigned k = 0; k < 3; k++, (*changed)++) {
        const uint64_t add = p->log_bytes / 100 > 200 ? p->log_bytes / 100 : 200;
        if (gen_log_file(root, seed, k, add, T0_MS + gen * 7 * DAY_MS, gen) != 0)
            return -1;
    }
    const uint64_t nnew = p->events / 100 ? p->events / 100 : 1;
    for (uint64_t k = 0; k < nnew; k++, (*changed)++)
        if (gen_event(root, seed, p->events + (uint64_t)(gen - 1) * nnew + k, 0, EVENTS_PER_FOLDER, EVENT_MEAN) != 0)
            return -1;
    const uint64_t nedit = p->frames * 6 / 100 ? p->frames * 6 / 100 : 1;
    for (uint64_t k = 0; k < nedit; k++) {
        bgen_rng r = { bgen_seed(seed, K_EDIT, k, gen) };
        frame_path(dir, sizeof(dir), name, sizeof(name), root, (k * p->frames / nedit + gen) % p->frames);
        snprintf(from, sizeof(from), "%s/%s", dir, name);
        const int fd = open(from, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_size < FRAME_HEADER + 16) {
            close(fd);
            continue;
        }
        const uint64_t span = (uint64_t)st.st_size - FRAME_HEADER - 16;
        const off_t at = (off_t)(FRAME_HEADER + (bgen_below(&r, span + 1) & ~(uint64_t)1));
        const uint64_t patch[2] = { bgen_next(&r), bgen_next(&r) };
        const ssize_t w = pwrite(fd, patch, sizeof(patch), at);
        close(fd);
        if (w != (ssize_t)sizeof(patch)) {
            fprintf(stderr, "ingestctl bench gen: %s: edit failed\n", from);
            return -1;
        }
        (*changed)++;
    }
    const uint64_t folders = p->events / EVENTS_PER_FOLDER;
    if (folders > 0) {
        const uint64_t f = (uint64_t)gen * 37 % folders;
        event_path(dir, sizeof(dir), name, sizeof(name), root, f * EVENTS_PER_FOLDER, EVENTS_PER_FOLDER);
        snprintf(from, sizeof(from), "%s", dir);
        snprintf(to, sizeof(to), "%s-reprocessed-g%u", dir, gen);
        if (rename(from, to) == 0)
            (*changed)++;
        const uint64_t fd = (f + 1) % folders;
        for (uint64_t k = 0; k < 5; k++) {
            event_path(dir, sizeof(dir), name, sizeof(name), root, fd * EVENTS_PER_FOLDER + k * 17 + 3,
                       EVENTS_PER_FOLDER);
            snprintf(from, sizeof(from), "%s/%s", dir, name);
            if (unlink(from) == 0)
                (*changed)++;
        }
    }
    export_path(dir, sizeof(dir), name, sizeof(name), root, (uint64_t)gen * 13 % p->exports);
    snprintf(from, sizeof(from), "%s/%s", dir, name);
    if (unlink(from) == 0)
        (*changed)++;
    return 0;
}

int bench_gen_gateway(const char *root, uint64_t size, uint64_t seed, unsigned gen, unsigned *files)
{
    gw_plan p;
    plan_of(size, &p);
    *files = 0;
    return gen ? gateway_evolve(root, seed, &p, gen, files) : gateway_generate(root, seed, &p, files);
}

/* ---- the small tree ---------------------------------------------------------- */

#define SMALL_MEAN 880 /* ~900 bytes */
#define SMALL_PER_FOLDER 500

/*
 * Generation 0: nfiles events.  Generation gen: 1% new events (the next
 * indices) and 10 events rewritten (new content, about the same size).
 */
int bench_gen_small(const char *root, uint64_t nfiles, uint64_t seed, unsigned gen, unsigned *files)
{
    *files = 0;
    if (gen == 0) {
        for (uint64_t i = 0; i < nfiles; i++, (*files)++)
            if (gen_event(root, seed, i, 0, SMALL_PER_FOLDER, SMALL_MEAN) != 0)
                return -1;
        return 0;
    }
    const uint64_t nnew = nfiles / 100 ? nfiles / 100 : 1, nedit = nfiles < 10 ? nfiles : 10;
    for (uint64_t k = 0; k < nnew; k++, (*files)++)
        if (gen_event(root, seed, nfiles + (uint64_t)(gen - 1) * nnew + k, 0, SMALL_PER_FOLDER, SMALL_MEAN) != 0)
            return -1;
    for (uint64_t k = 0; k < nedit; k++, (*files)++)
        if (gen_event(root, seed, (k * nfiles / nedit + gen * 3) % nfiles, gen, SMALL_PER_FOLDER, SMALL_MEAN) != 0)
            return -1;
    return 0;
}
