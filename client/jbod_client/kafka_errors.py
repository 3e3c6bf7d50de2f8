"""The errors of this project's Kafka clients (`kafka_admin`, the protocol client; `rdkafka`,
librdkafka as jbodctl uses it), apart from their codecs so that naming them costs no import of
kio or librdkafka: jbodctl's hints look at every error a command raises.

Guarantees: each is a `ClientError` whose `str()` is one line naming the listener or listeners.
"""

from __future__ import annotations

from jbod_client.controller import ClientError


class KafkaUnreachableError(ClientError):
    """A Kafka listener could not be reached, or dropped the connection; `str()` names its
    address, `address` holds it when there is one listener to blame (`host:port`)."""

    def __init__(self, message: str, *, address: str | None = None) -> None:
        super().__init__(message)
        self.address = address


class KafkaAuthenticationError(ClientError):
    """A Kafka listener refused the login (or failed SCRAM's proof of the password)."""


class KafkaProtocolError(ClientError):
    """An answer a Kafka client cannot use: undecodable, or an API the broker does not serve."""
