-- Running total: the year in which each customer's orders first added up to 1,000,000.
SELECT extract(year FROM o_orderdate) AS o_year, count(*) AS customers
FROM (
    SELECT
        o_custkey,
        o_orderdate,
        o_totalprice,
        sum(o_totalprice) OVER (
            PARTITION BY o_custkey ORDER BY o_orderdate, o_orderkey
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS running_total
    FROM orders
) AS running
WHERE running_total >= 1000000 AND running_total - o_totalprice < 1000000
GROUP BY o_year
ORDER BY o_year;
