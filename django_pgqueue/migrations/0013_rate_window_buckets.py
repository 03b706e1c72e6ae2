"""Rate windows are bounded (``sql.limits``): a window of more than 100 starts per period counts
its starts per hundredth of the period (``counts``, beside each bucket's start in ``recent``)
instead of keeping every start's time. A ``100000/d`` window kept 100,000 timestamps, and every
limited claim read them all. Windows of that size are converted: their starts, counted per
bucket.

The SQL is frozen here: it is what this migration ran, whatever the package's code says later.
"""

from __future__ import annotations

from django.db import migrations

import django_pgqueue.fields

FORWARD = r"""
UPDATE pgqueue_rate_window w SET (recent, counts) = (
    SELECT coalesce(array_agg(b.t ORDER BY b.t), ARRAY[]::timestamptz[]),
           coalesce(array_agg(b.n ORDER BY b.t), ARRAY[]::integer[])
    FROM (SELECT to_timestamp(floor(extract(epoch FROM u.t) / (w.period / 100))
                              * (w.period / 100)) AS t,
                 count(*)::integer AS n
          FROM unnest(w.recent) AS u(t) GROUP BY 1) b)
WHERE w.starts > 100;
"""

# Each bucket's starts as that many times (its start), the newest ``starts`` kept.
BACKWARD = r"""
UPDATE pgqueue_rate_window w SET recent = (
    SELECT coalesce(array_agg(x.t ORDER BY x.t), ARRAY[]::timestamptz[]) FROM (
        SELECT s.t FROM unnest(w.recent, w.counts) AS s(t, n)
        CROSS JOIN generate_series(1, least(coalesce(s.n, 1), w.starts))
        ORDER BY s.t DESC LIMIT w.starts) x),
    counts = ARRAY[]::integer[]
WHERE w.starts > 100;
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0012_ready_follows_job")]

    operations = [
        migrations.AddField(
            model_name="ratewindow",
            name="counts",
            field=django_pgqueue.fields.IntegerArrayField(default=list),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
