-- Year over year: each nation's revenue, its change from the year before and its rank
-- among the nations that year.
WITH yearly AS (
    SELECT
        n_name AS nation,
        extract(year FROM o_orderdate) AS o_year,
        sum(l_extendedprice * (1 - l_discount)) AS revenue
    FROM lineitem
    JOIN orders ON l_orderkey = o_orderkey
    JOIN supplier ON l_suppkey = s_suppkey
    JOIN nation ON s_nationkey = n_nationkey
    GROUP BY n_name, o_year
)
SELECT
    nation,
    o_year,
    revenue,
    revenue - lag(revenue) OVER (PARTITION BY nation ORDER BY o_year) AS change,
    dense_rank() OVER (PARTITION BY o_year ORDER BY revenue DESC) AS rank_in_year
FROM yearly
ORDER BY nation, o_year;
