"""English, as staff in any country read it: ISO 8601 dates (2026-12-03) and a 24-hour clock
(14:05), never Django's US default ("Dec. 3, 2026, 2:05 p.m."), which readers outside the US
misread and which sorts badly in a table (issue #31)."""

DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i"
DATETIME_FORMAT = "Y-m-d H:i"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
YEAR_MONTH_FORMAT = "Y-m"
MONTH_DAY_FORMAT = "m-d"
FIRST_DAY_OF_WEEK = 1  # Monday, as ISO 8601
