// A Scala user's Spark job, as spark-shell runs it (`spark-shell --jars ... -i job.scala`):
// python/tests/test_spark_jvm.py runs it against a quiver server named by QUIVER_URI.
val uri = sys.env("QUIVER_URI")
val trips = spark.read.format("quiver").option("uri", uri).load("trips")
val from500 = trips.where($"id" >= 500).count()
trips.where($"id" < 100).write.format("quiver").option("uri", uri).mode("overwrite").save("copy")
val rows = trips.count()
println(s"quiver-scala-job rows=$rows from500=$from500 partitions=${trips.rdd.getNumPartitions}")
System.exit(0)
