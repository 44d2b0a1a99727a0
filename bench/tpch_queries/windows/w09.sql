-- Spread per group over joined rows: the standard deviation of the price paid by supplier
-- nation and manufacturer.
SELECT
    n_name,
    p_mfgr,
    count(*) AS lines,
    avg(l_extendedprice * (1 - l_discount)) AS avg_paid,
    stddev_samp(l_extendedprice * (1 - l_discount)) AS stddev_paid
FROM lineitem
JOIN part ON l_partkey = p_partkey
JOIN supplier ON l_suppkey = s_suppkey
JOIN nation ON s_nationkey = n_nationkey
GROUP BY n_name, p_mfgr
ORDER BY n_name, p_mfgr;
