//! A batch's rows grouped by the part file they go to (a counting sort, linear in the
//! rows), so that each part takes all its rows of the batch in one run: its writer and
//! buffers stay hot in the cache instead of forty of them taking turns row by row, and a
//! Parquet part fills its builders one column at a time.

/// The rows of one batch by part. Reused from batch to batch: no allocation once warm.
#[derive(Debug, Default)]
pub(super) struct Routes {
    /// Each routed row and its part, in row order.
    part_of: Vec<(usize, usize)>,
    /// Per part index: its rows in this batch, then where its group starts; all zero
    /// between batches.
    count: Vec<usize>,
    /// Parts with rows in this batch, in the order of their first row.
    touched: Vec<usize>,
    /// Row indices grouped by part (groups in `touched` order, rows ascending in each).
    order: Vec<usize>,
    /// Per group: its part and its end in `order`.
    groups: Vec<(usize, usize)>,
}

impl Routes {
    /// Starts a new batch.
    pub(super) fn clear(&mut self) {
        self.part_of.clear();
        self.touched.clear();
        self.order.clear();
        self.groups.clear();
    }

    /// Routes row `row` of the batch (ascending from call to call) to `part`.
    pub(super) fn push(&mut self, row: usize, part: usize) {
        if self.count.len() <= part {
            self.count.resize(part + 1, 0);
        }
        if self.count[part] == 0 {
            self.touched.push(part);
        }
        self.count[part] += 1;
        self.part_of.push((row, part));
    }

    /// Groups the rows pushed since `clear`, ready for [`Routes::groups`].
    pub(super) fn group(&mut self) {
        let mut start = 0;
        for &part in &self.touched {
            let rows = self.count[part];
            self.count[part] = start;
            start += rows;
            self.groups.push((part, start));
        }
        self.order.resize(self.part_of.len(), 0);
        for &(row, part) in &self.part_of {
            self.order[self.count[part]] = row;
            self.count[part] += 1;
        }
        for &part in &self.touched {
            self.count[part] = 0;
        }
    }

    /// The part of the `group`th group, if there is one.
    pub(super) fn part_at(&self, group: usize) -> Option<usize> {
        self.groups.get(group).map(|&(part, _)| part)
    }

    /// Each part with its rows, in the order of the parts' first rows.
    pub(super) fn groups(&self) -> impl Iterator<Item = (usize, &[usize])> + '_ {
        let mut start = 0;
        self.groups.iter().map(move |&(part, end)| {
            let rows = &self.order[start..end];
            start = end;
            (part, rows)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn grouped(routes: &Routes) -> Vec<(usize, Vec<usize>)> {
        routes
            .groups()
            .map(|(p, rows)| (p, rows.to_vec()))
            .collect()
    }

    #[test]
    fn rows_go_out_by_part_in_order() {
        let mut routes = Routes::default();
        for (row, part) in [2, 0, 2, 5, 0, 2].into_iter().enumerate() {
            routes.push(row, part);
        }
        routes.group();
        assert_eq!(
            grouped(&routes),
            vec![(2, vec![0, 2, 5]), (0, vec![1, 4]), (5, vec![3])]
        );
        // The next batch starts from nothing; rows another sink writes are skipped.
        routes.clear();
        routes.push(1, 0);
        routes.push(3, 0);
        routes.group();
        assert_eq!(grouped(&routes), vec![(0, vec![1, 3])]);
    }

    proptest! {
        /// Every row exactly once, under its own part, rows ascending within a part.
        #[test]
        fn a_permutation_that_keeps_each_parts_order(
            batches in prop::collection::vec(prop::collection::vec(0usize..40, 0..300), 1..4),
        ) {
            let mut routes = Routes::default();
            for parts in batches {
                routes.clear();
                for (row, &p) in parts.iter().enumerate() {
                    routes.push(row, p);
                }
                routes.group();
                let mut seen = vec![false; parts.len()];
                for (part, rows) in routes.groups() {
                    prop_assert!(rows.windows(2).all(|w| w[0] < w[1]));
                    for &row in rows {
                        prop_assert_eq!(parts[row], part);
                        prop_assert!(!std::mem::replace(&mut seen[row], true));
                    }
                }
                prop_assert!(seen.iter().all(|&s| s));
            }
        }
    }
}
