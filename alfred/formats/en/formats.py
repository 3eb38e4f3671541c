"""One way to write a moment across the admin (``FORMAT_MODULE_PATH``): ISO-like, 24 hours,
with the time zone, so an operator comparing a timeline with a log or a provider's console
never guesses. Only display formats: the input formats stay Django's."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = DATETIME_FORMAT
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = DATE_FORMAT
TIME_FORMAT = "H:i:s"
