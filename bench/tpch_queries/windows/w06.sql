-- Subtotals by rollup: revenue by region, nation and year, with each level's subtotal.
SELECT
    r_name,
    n_name,
    extract(year FROM o_orderdate) AS o_year,
    grouping(r_name, n_name, extract(year FROM o_orderdate)) AS level,
    sum(l_extendedprice * (1 - l_discount)) AS revenue,
    count(*) AS lines
FROM lineitem
JOIN orders ON l_orderkey = o_orderkey
JOIN customer ON o_custkey = c_custkey
JOIN nation ON c_nationkey = n_nationkey
JOIN region ON n_regionkey = r_regionkey
GROUP BY ROLLUP (r_name, n_name, extract(year FROM o_orderdate))
ORDER BY r_name NULLS LAST, n_name NULLS LAST, o_year NULLS LAST;
