-- A group's average beside each row: line items priced above twice the average of their
-- return flag, line status and ship mode.
SELECT
    l_returnflag,
    l_linestatus,
    l_shipmode,
    count(*) AS items,
    sum(l_extendedprice) AS price,
    min(avg_price) AS avg_price
FROM (
    SELECT
        l_returnflag,
        l_linestatus,
        l_shipmode,
        l_extendedprice,
        avg(l_extendedprice) OVER (
            PARTITION BY l_returnflag, l_linestatus, l_shipmode
        ) AS avg_price
    FROM lineitem
) AS priced
WHERE l_extendedprice > 2 * avg_price
GROUP BY l_returnflag, l_linestatus, l_shipmode
ORDER BY l_returnflag, l_linestatus, l_shipmode;
