"""What a result is written as: the output-format table (`formats`), MIDI (`midi`) and the
annotation tools' formats (`annotations`), and the columns they take from the kinds' own tag
fields (`columns`).

May import: kinds (a note's name, the kinds' tag fields), types.
"""
