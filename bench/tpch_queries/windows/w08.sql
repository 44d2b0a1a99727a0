-- Grouping sets: the quantity sold and revenue by brand, by type and by container, one pass.
SELECT
    p_brand,
    p_type,
    p_container,
    sum(l_quantity) AS quantity,
    sum(l_extendedprice * (1 - l_discount)) AS revenue
FROM lineitem
JOIN part ON l_partkey = p_partkey
GROUP BY GROUPING SETS ((p_brand), (p_type), (p_container))
ORDER BY p_brand NULLS LAST, p_type NULLS LAST, p_container NULLS LAST;
