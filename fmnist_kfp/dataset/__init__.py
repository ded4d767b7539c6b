"""Fashion-MNIST ingestion: official files, verification and the tf.data input pipeline."""
