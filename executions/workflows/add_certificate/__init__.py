"""add-certificate: request (or adopt) an ACM certificate and make it ISSUED via DNS validation.

``input.py``: the input contract, its canonical form and the lane.
"""

from executions.workflows.add_certificate.input import AddCertificate

workflow = AddCertificate()
