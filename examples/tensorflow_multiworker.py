"""Multi-worker synchronous training with TensorFlow's MultiWorkerMirroredStrategy, as for a TFJob.

The Kubeflow Training Operator (and distrun's local engine) sets TF_CONFIG in every replica: the
cluster's worker addresses and this replica's task. With no chief, worker 0 is the chief by TF's
rule. The strategy all-reduces the gradients over gRPC, so every worker ends with the same
weights, and the checksum printed at the end shows it.

A custom training loop rather than `model.fit`: with Keras 3 (TensorFlow >= 2.16), `fit` under
MultiWorkerMirroredStrategy fails with "Attempt to convert a value (PerReplica...)"
(keras-team/keras#20585); the loop below is TensorFlow's documented alternative. It draws
Keras' own progress bar, as `fit` would; STEP_SECONDS paces the steps, to watch it move.
"""

import hashlib
import json
import os
import time

import numpy as np
import tensorflow as tf

EPOCHS = 3
STEPS_PER_EPOCH = 10
GLOBAL_BATCH_SIZE = 32


def synthetic_regression(samples: int = 640, features: int = 8) -> tf.data.Dataset:
    """y = x . w + noise, the same on every worker (fixed seed); the strategy shards it."""
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((samples, features)).astype("float32")
    true_w = rng.standard_normal((features, 1)).astype("float32")
    y = x @ true_w + 0.05 * rng.standard_normal((samples, 1)).astype("float32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(samples, seed=0).repeat()
    return dataset.batch(GLOBAL_BATCH_SIZE).with_options(options)


def weights_sha256(model: tf.keras.Model) -> str:
    digest = hashlib.sha256()
    for weights in model.get_weights():
        digest.update(np.ascontiguousarray(weights).tobytes())
    return digest.hexdigest()


def main() -> None:
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print(f"{task['type']} {task['index']}: {strategy.num_replicas_in_sync} replicas in sync")

    with strategy.scope():
        tf.keras.utils.set_random_seed(0)  # the same initial weights on every worker
        model = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(8,)),
                tf.keras.layers.Dense(16, activation="tanh"),
                tf.keras.layers.Dense(1),
            ]
        )
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
    batches = iter(strategy.experimental_distribute_dataset(synthetic_regression()))

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH_SIZE)
        gradients = tape.gradient(loss, model.trainable_variables)
        # The optimizer all-reduces the gradients across workers before applying them.
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step() -> tf.Tensor:
        x, y = next(batches)
        per_replica_loss = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)

    step_seconds = float(os.environ.get("STEP_SECONDS", "0"))
    for epoch in range(EPOCHS):
        print(f"Epoch {epoch + 1}/{EPOCHS}", flush=True)
        progress = tf.keras.utils.Progbar(STEPS_PER_EPOCH, stateful_metrics=["loss"])
        total = 0.0
        for step in range(STEPS_PER_EPOCH):
            total += float(train_step())
            time.sleep(step_seconds)
            progress.update(step + 1, values=[("loss", total / (step + 1))])
        epoch_loss = total / STEPS_PER_EPOCH
        print(f"epoch {epoch} loss={epoch_loss:.4f}", flush=True)

    print(f"final_loss={epoch_loss:.4f}", flush=True)
    print(f"weights_sha={weights_sha256(model)}", flush=True)


if __name__ == "__main__":
    main()
