"""update-lambda-version: move every function of a fleet to one published version.

``input.py``: the input contract, its canonical form and the lane; ``stages.py``: the stages.
"""

from workflows.update_lambda_version import stages
from workflows.update_lambda_version.input import UpdateLambdaVersion

workflow = UpdateLambdaVersion(stages)
