"""add-certificate: request (or adopt) an ACM certificate and make it ISSUED via DNS validation.

``input.py``: the input contract, its canonical form and the lane; ``stages.py``: the stages.
"""

from workflows.add_certificate import stages
from workflows.add_certificate.input import AddCertificate

workflow = AddCertificate(stages)
