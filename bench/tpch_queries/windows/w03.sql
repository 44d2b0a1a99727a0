-- Top-N per group over raw rows: each supplier's 2 dearest line items.
SELECT l_suppkey, l_orderkey, l_linenumber, l_extendedprice, rn
FROM (
    SELECT
        l_suppkey,
        l_orderkey,
        l_linenumber,
        l_extendedprice,
        row_number() OVER (
            PARTITION BY l_suppkey ORDER BY l_extendedprice DESC, l_orderkey, l_linenumber
        ) AS rn
    FROM lineitem
) AS numbered
WHERE rn <= 2
ORDER BY l_suppkey, rn
LIMIT 100;
