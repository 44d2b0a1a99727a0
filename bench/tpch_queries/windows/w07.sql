-- Every combination of subtotals: a cube of the line items' flags and ship mode.
SELECT
    l_returnflag,
    l_linestatus,
    l_shipmode,
    sum(l_quantity) AS quantity,
    sum(l_extendedprice) AS price,
    avg(l_discount) AS avg_discount,
    count(*) AS lines
FROM lineitem
GROUP BY CUBE (l_returnflag, l_linestatus, l_shipmode)
ORDER BY l_returnflag NULLS LAST, l_linestatus NULLS LAST, l_shipmode NULLS LAST;
