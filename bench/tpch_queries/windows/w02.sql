-- Top-N per group: each nation's 3 best customers by the total of their orders.
SELECT nation, c_name, total, rnk
FROM (
    SELECT
        n_name AS nation,
        c_name,
        sum(o_totalprice) AS total,
        rank() OVER (PARTITION BY n_name ORDER BY sum(o_totalprice) DESC) AS rnk
    FROM customer
    JOIN orders ON o_custkey = c_custkey
    JOIN nation ON c_nationkey = n_nationkey
    GROUP BY n_name, c_name
) AS ranked
WHERE rnk <= 3
ORDER BY nation, rnk, c_name;
