//! Windows and freezes at chosen instants: weekdays, midnight, time zones,
//! daylight saving, and which hold wins.

use super::*;
use chrono::TimeZone;

fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

fn window(days: &[Weekday], start: &str, end: &str, tz: Option<&str>) -> ReleaseWindow {
    ReleaseWindow {
        days: days.to_vec(),
        start: start.into(),
        end: end.into(),
        time_zone: tz.map(str::to_string),
    }
}

fn parsed(w: ReleaseWindow) -> Window {
    parse(&[w]).unwrap().remove(0)
}

const OFFICE: [Weekday; 5] = [
    Weekday::Mon,
    Weekday::Tue,
    Weekday::Wed,
    Weekday::Thu,
    Weekday::Fri,
];

#[test]
fn office_hours_in_paris() {
    // 2026-12-02 is a Wednesday; Paris is UTC+1 in winter.
    let w = parsed(window(&OFFICE, "09:00", "17:00", Some("Europe/Paris")));
    assert!(!w.is_open(at(2026, 12, 2, 7, 59)), "08:59 Paris");
    assert!(w.is_open(at(2026, 12, 2, 8, 0)), "09:00 Paris");
    assert!(w.is_open(at(2026, 12, 2, 15, 59)), "16:59 Paris");
    assert!(!w.is_open(at(2026, 12, 2, 16, 0)), "17:00 Paris: closed");
    // Saturday noon: closed; it opens on Monday 09:00 Paris.
    let sat = at(2026, 12, 5, 11, 0);
    assert!(!w.is_open(sat));
    assert_eq!(w.next_opening(sat), Some(at(2026, 12, 7, 8, 0)));
    // Friday evening: next is Monday too, not Saturday.
    assert_eq!(
        w.next_opening(at(2026, 12, 4, 18, 0)),
        Some(at(2026, 12, 7, 8, 0))
    );
}

#[test]
fn a_window_past_midnight_closes_the_next_day() {
    // Friday 22:00 to 02:00 UTC: open Saturday 01:00, closed Saturday 22:00
    // and Friday 21:00.
    let w = parsed(window(&[Weekday::Fri], "22:00", "02:00", None));
    assert!(w.is_open(at(2026, 12, 4, 22, 0)));
    assert!(w.is_open(at(2026, 12, 5, 1, 59)));
    assert!(!w.is_open(at(2026, 12, 5, 2, 0)));
    assert!(!w.is_open(at(2026, 12, 5, 22, 30)));
    assert!(!w.is_open(at(2026, 12, 4, 21, 0)));
    // Thursday 01:00 is not "Wednesday's" window: Wednesday is not listed.
    assert!(!w.is_open(at(2026, 12, 3, 1, 0)));
    // An end of 24:00 means midnight.
    let late = parsed(window(&[], "20:00", "24:00", None));
    assert!(late.is_open(at(2026, 12, 2, 23, 59)));
    assert!(!late.is_open(at(2026, 12, 3, 0, 0)));
}

#[test]
fn daylight_saving_moves_the_utc_instant_not_the_local_time() {
    // New York: 09:00 local is 14:00 UTC in winter, 13:00 UTC in summer
    // (DST starts 2027-03-14).
    let w = parsed(window(&[], "09:00", "10:00", Some("America/New_York")));
    assert!(w.is_open(at(2027, 3, 12, 14, 30)));
    assert!(!w.is_open(at(2027, 3, 15, 14, 30)));
    assert!(w.is_open(at(2027, 3, 15, 13, 30)));
    assert_eq!(
        w.next_opening(at(2027, 3, 13, 15, 0)),
        Some(at(2027, 3, 14, 13, 0))
    );
    // A start inside the spring-forward gap (02:30 does not exist that day)
    // opens when the gap ends, 03:00 EDT; one wholly inside the gap opens
    // on the next listed day instead.
    let gap = parsed(window(
        &[Weekday::Sun, Weekday::Mon],
        "02:30",
        "04:00",
        Some("America/New_York"),
    ));
    assert_eq!(
        gap.next_opening(at(2027, 3, 14, 0, 0)),
        Some(at(2027, 3, 14, 7, 0))
    );
    let inside = parsed(window(
        &[Weekday::Sun, Weekday::Mon],
        "02:10",
        "02:40",
        Some("America/New_York"),
    ));
    assert_eq!(
        inside.next_opening(at(2027, 3, 14, 0, 0)),
        Some(at(2027, 3, 15, 6, 10))
    );
}

#[test]
fn a_bad_time_zone_is_an_invalid_spec_naming_the_field() {
    let e = parse(&[
        window(&[], "09:00", "17:00", Some("UTC")),
        window(&[], "09:00", "17:00", Some("Mars/Olympus")),
    ])
    .unwrap_err();
    assert_eq!(e.field, "spec.strategy.windows[1].timeZone");
    assert!(e.message.contains("Mars/Olympus"), "{}", e.message);
    let e = parse(&[window(&[], "9am", "17:00", None)]).unwrap_err();
    assert_eq!(e.field, "spec.strategy.windows[0].start");
}

#[test]
fn no_windows_never_hold_and_one_open_window_is_enough() {
    let now = at(2026, 12, 5, 11, 0); // Saturday
    assert_eq!(hold(&[], &[], now), None);
    let office = parsed(window(&OFFICE, "09:00", "17:00", None));
    let weekend = parsed(window(&[Weekday::Sat], "10:00", "12:00", None));
    assert_eq!(hold(&[office.clone(), weekend], &[], now), None);
    let h = hold(&[office], &[], now).unwrap();
    assert_eq!(h.kind, HoldKind::OutsideWindow);
    assert_eq!(h.until, Some(at(2026, 12, 7, 9, 0)));
    assert!(
        h.message.contains("2026-12-07T09:00:00+00:00"),
        "{}",
        h.message
    );
    assert_eq!(
        h.left(now),
        Some(Duration::from_secs(2 * 86_400 - 2 * 3600))
    );
}

fn freeze(name: &str, start: DateTime<Utc>, end: Option<DateTime<Utc>>) -> Freeze {
    Freeze {
        name: name.into(),
        start,
        end,
        reason: Some("holidays".into()),
    }
}

#[test]
fn a_freeze_holds_from_start_to_end_and_wins_over_an_open_window() {
    let start = at(2026, 12, 24, 0, 0);
    let end = at(2026, 12, 27, 0, 0);
    let f = [freeze("xmas", start, Some(end))];
    let always = parsed(window(&[], "00:00", "24:00", None));
    let always = std::slice::from_ref(&always);
    assert_eq!(hold(always, &f, at(2026, 12, 23, 23, 59)), None);
    let h = hold(always, &f, start).unwrap();
    assert_eq!((h.kind, h.until), (HoldKind::Frozen, Some(end)));
    assert!(h.message.contains("xmas (holidays)"), "{}", h.message);
    assert_eq!(hold(always, &f, end), None, "the end is exclusive");
    // Two freezes in force: held until the later end; one without an end:
    // until it is lifted.
    let later = freeze("eoy", start, Some(at(2027, 1, 2, 0, 0)));
    let h = hold(&[], &[f[0].clone(), later], at(2026, 12, 25, 0, 0)).unwrap();
    assert_eq!(h.until, Some(at(2027, 1, 2, 0, 0)));
    let open = freeze("incident", start, None);
    let h = hold(&[], &[f[0].clone(), open], at(2026, 12, 25, 0, 0)).unwrap();
    assert_eq!(h.until, None);
    assert!(h.message.contains("until it is lifted"), "{}", h.message);
    assert_eq!(h.left(at(2026, 12, 25, 0, 0)), None);
}

proptest::proptest! {
    /// Outside every window, the next opening is in the future, no window is
    /// open just before it, and one is open at it.
    #[test]
    fn the_next_opening_is_the_first_open_minute(
        day_mask in 1u8..128,
        start in 0u32..1440,
        len in 1u32..1439,
        minute in 0i64..(60 * 24 * 21),
        tz in proptest::sample::select(vec!["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]),
    ) {
        let days: Vec<Weekday> = OFFICE
            .iter()
            .chain(&[Weekday::Sat, Weekday::Sun])
            .enumerate()
            .filter(|(i, _)| day_mask & (1 << i) != 0)
            .map(|(_, d)| *d)
            .collect();
        let end = (start + len) % 1440;
        let hm = |m: u32| format!("{:02}:{:02}", m / 60, m % 60);
        let w = parsed(window(&days, &hm(start), &hm(end), Some(tz)));
        let now = at(2027, 3, 1, 0, 0) + chrono::Duration::minutes(minute);
        if let Some(h) = hold(std::slice::from_ref(&w), &[], now) {
            let open = h.until.expect("a window opens within two weeks");
            proptest::prop_assert!(open > now);
            proptest::prop_assert!(w.is_open(open), "not open at {open}");
            proptest::prop_assert!(!w.is_open(open - chrono::Duration::minutes(1)) || open - chrono::Duration::minutes(1) <= now);
        } else {
            proptest::prop_assert!(w.is_open(now));
        }
    }
}
