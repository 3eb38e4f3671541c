"""add-certificate: request (or adopt) an ACM certificate and make it ISSUED via DNS validation.

``input.py``: the input contract, its canonical form and the lane; ``stages.py``: the stages.
"""

from executions.workflows.add_certificate import stages
from executions.workflows.add_certificate.input import AddCertificate

workflow = AddCertificate(stages)
