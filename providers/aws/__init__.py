"""AWS adapters (boto3): Route53, ACM, Lambda.

Each adapter takes explicit clients or an :class:`~providers.aws.clients.AwsClients` factory
(region, credentials and endpoint default to boto3's own environment, so ``AWS_ENDPOINT_URL``
points them at the sandbox), raises :mod:`providers.errors` with AWS's code and message, and
returns :mod:`providers.handles` for the work it starts. Calls whose repetition is unsafe go
through clients that never retry, and a lost response is resolved by reading the provider's
state (the module docstrings of :mod:`.route53` and :mod:`.lambda_` give the rules).
"""

from providers.aws.acm import Acm
from providers.aws.clients import AwsClients
from providers.aws.lambda_ import Lambda
from providers.aws.route53 import Route53

__all__ = ["Acm", "AwsClients", "Lambda", "Route53"]
