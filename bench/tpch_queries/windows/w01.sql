-- Moving average: each nation's monthly revenue beside its average over the last 3 months.
WITH monthly AS (
    SELECT
        n_name AS nation,
        extract(year FROM o_orderdate) * 100 + extract(month FROM o_orderdate) AS month,
        sum(l_extendedprice * (1 - l_discount)) AS revenue
    FROM lineitem
    JOIN orders ON l_orderkey = o_orderkey
    JOIN customer ON o_custkey = c_custkey
    JOIN nation ON c_nationkey = n_nationkey
    GROUP BY n_name, month
)
SELECT
    nation,
    month,
    revenue,
    avg(revenue) OVER (
        PARTITION BY nation ORDER BY month ROWS BETWEEN 2 PRECEDING AND CURRENT ROW
    ) AS moving_avg_3m
FROM monthly
ORDER BY nation, month;
