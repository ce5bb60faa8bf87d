"""rocketmq-tiered: tiered-storage offload sidecar for Apache RocketMQ brokers."""

__version__ = "0.1.0"
